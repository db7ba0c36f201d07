"""Write a generated catalogue and its goals in WebShop's data-file formats.

``items_shuffle.json`` (products), ``items_ins_v2.json`` (asin -> attributes and one
instruction) and ``items_human_ins.json`` (asin -> list of instructions with attributes and
options), so tools written for WebShop's data can read a BudgetMix catalogue.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from budget_envs.envs.webshop.catalogue import Product
from budget_envs.envs.webshop.shop import Shop

__all__ = ["FILES", "export_webshop", "product_raw"]

FILES = ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json")


def product_raw(p: Product) -> dict:
    """A product in the format of WebShop's ``items_shuffle.json``."""
    return {
        "asin": p.asin,
        "name": p.title,
        "full_description": p.description,
        "small_description": list(p.bullets),
        "pricing": f"${p.price:.2f}",
        "customization_options": {
            dim: [{"value": v, "image": None} for v in values] for dim, values in p.options.items()
        },
        "images": [],
        "category": p.spec.category,
        "query": p.query,
        "product_category": p.product_category,
        "average_rating": p.rating,
        "attributes": list(p.attributes),
        "reviews": [{"score": s, "body": t} for s, t in p.reviews],
    }


def export_webshop(shop: Shop, out_dir: str | Path, task_ids: Iterable[str]) -> list[Path]:
    """Write the three files for ``shop`` and the one-item tasks among ``task_ids``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ins_v2: dict[str, dict] = {}
    human: dict[str, list] = {}
    for task_id in task_ids:
        task = shop.task(task_id)
        if task.multi:
            continue
        item = task.items[0]
        p = shop.product(item.asin)
        ins_v2.setdefault(
            p.asin,
            {
                "attributes": list(p.attributes),
                "instruction": task.instruction,
                "instruction_attributes": list(item.attributes),
            },
        )
        human.setdefault(p.asin, []).append(
            {
                "asin": p.asin,
                "instruction": task.instruction,
                "instruction_attributes": list(item.attributes),
                "instruction_options": list(item.goal_options.values()),
                "price_upper": item.price_upper,
                "task_id": task.task_id,
            }
        )
    paths = []
    for name, data in zip(FILES, ([product_raw(p) for p in shop.products], ins_v2, human)):
        path = out / name
        path.write_text(json.dumps(data), encoding="utf-8")
        paths.append(path)
    return paths
