"""ToolUse's tools as data: each tool's kind, arguments and description, and its OpenAI schema.

:data:`TOOLS` is the one table the parser (:mod:`~budget_envs.envs.tooluse.calls`), the SQL
(:mod:`~budget_envs.envs.tooluse.tools`), the oracle and the env read; ``info["tools"]`` is
:data:`TOOLS_SCHEMA`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budget_envs.envs.tooluse.world import PAGE_SIZE

__all__ = [
    "READ_TOOLS",
    "TOOLS",
    "TOOLS_SCHEMA",
    "TOOL_BY_NAME",
    "TOOL_NAMES",
    "WRITE_TOOLS",
    "Param",
    "Tool",
]


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "id" | "text" | "enum"
    description: str
    prefix: str = ""
    required: bool = True
    max_length: int = 200
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tool:
    name: str
    kind: str  # "read" | "write" | "submit"
    description: str
    params: tuple[Param, ...] = ()


def _id(name: str, prefix: str, what: str, required: bool = True) -> Param:
    return Param(name, "id", f"{what} id, as shown by an earlier tool result", prefix, required)


TOOLS: tuple[Tool, ...] = (
    Tool(
        "find_customer",
        "read",
        "Look up a customer by email address.",
        (Param("email", "text", "the customer's email address", max_length=120),),
    ),
    Tool(
        "list_orders",
        "read",
        f"List a customer's orders, oldest first, {PAGE_SIZE} per page. Pass the next_cursor of "
        "a page to get the following page.",
        (
            _id("customer_id", "cus", "customer"),
            _id("cursor", "cur", "page cursor (omit for the first page)", required=False),
        ),
    ),
    Tool(
        "get_order",
        "read",
        "Show an order: status, address, note, payment and items.",
        (_id("order_id", "ord", "order"),),
    ),
    Tool(
        "list_variants",
        "read",
        "List every variant (colour, size, stock) of a product's model.",
        (_id("product_id", "prd", "product"),),
    ),
    Tool(
        "get_product",
        "read",
        "Show one product: name, colour, size, price, stock.",
        (_id("product_id", "prd", "product"),),
    ),
    Tool(
        "track_shipment",
        "read",
        "Show the carrier and shipping state of an order.",
        (_id("order_id", "ord", "order"),),
    ),
    Tool(
        "get_product_reviews",
        "read",
        "Show the average rating of a product.",
        (_id("product_id", "prd", "product"),),
    ),
    Tool("list_promotions", "read", "List the store's current promotions."),
    Tool(
        "get_loyalty_points",
        "read",
        "Show a customer's loyalty points and tier.",
        (_id("customer_id", "cus", "customer"),),
    ),
    Tool(
        "cancel_order",
        "write",
        "Cancel a pending order. Irreversible.",
        (
            _id("order_id", "ord", "order"),
            Param(
                "reason",
                "enum",
                "why the order is cancelled",
                enum=("no_longer_needed", "ordered_by_mistake"),
            ),
        ),
    ),
    Tool(
        "update_address",
        "write",
        "Change the shipping address of a pending order.",
        (_id("order_id", "ord", "order"), Param("address", "text", "the full new address")),
    ),
    Tool(
        "set_order_note",
        "write",
        "Set the note of an order; an empty note clears it.",
        (
            _id("order_id", "ord", "order"),
            Param("note", "text", "the note text (empty string to clear)"),
        ),
    ),
    Tool(
        "refund_item",
        "write",
        "Refund a delivered item to a payment of its order. Irreversible.",
        (
            _id("order_id", "ord", "order"),
            _id("item_id", "itm", "item"),
            _id("payment_id", "pay", "payment"),
        ),
    ),
    Tool(
        "exchange_item",
        "write",
        "Exchange a delivered item for another in-stock variant of the same model. Irreversible.",
        (
            _id("order_id", "ord", "order"),
            _id("item_id", "itm", "item"),
            _id("new_product_id", "prd", "product to send instead"),
        ),
    ),
    Tool(
        "submit",
        "submit",
        "Finish the ticket with the final answer. Ends the episode.",
        (Param("answer", "text", "the final answer asked for by the ticket", max_length=100),),
    ),
)
TOOL_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
#: Each tool's argument names (for the check of unexpected arguments).
_PARAM_NAMES: dict[str, frozenset[str]] = {
    t.name: frozenset(p.name for p in t.params) for t in TOOLS
}
TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in TOOLS)
READ_TOOLS = frozenset(t.name for t in TOOLS if t.kind == "read")
WRITE_TOOLS = frozenset(t.name for t in TOOLS if t.kind == "write")


def _schema(tool: Tool) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for p in tool.params:
        spec: dict[str, Any] = {"type": "string", "description": p.description}
        if p.kind == "id":
            spec["pattern"] = f"^{p.prefix}_[0-9a-f]{{8}}$"
        elif p.kind == "enum":
            spec["enum"] = list(p.enum)
        else:
            spec["maxLength"] = p.max_length
        props[p.name] = spec
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": [p.name for p in tool.params if p.required],
                "additionalProperties": False,
            },
        },
    }


#: The OpenAI tools schema (``info["tools"]``); shared, do not mutate.
TOOLS_SCHEMA: list[dict[str, Any]] = [_schema(t) for t in TOOLS]
