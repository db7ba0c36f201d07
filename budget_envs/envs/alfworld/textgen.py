"""textworld's grammar derivation (the text of the intro, feedback and commands), memoised.

:class:`_Deriver` derives exactly what textworld's ``ContextSensitiveGrammar`` does; one per
process (:func:`_deriver`) keeps the parsed start symbols and conditions of every game.
"""

from __future__ import annotations

from typing import Any

from budget_envs.envs.alfworld.loading import _PARSE_LOCK


class _Deriver:
    """textworld's context-sensitive grammar derivation, with parses memoised and no deep copies.

    Same algorithm and the same symbol classes as ``ContextSensitiveGrammar.derive`` (first
    applicable rule, conditional queries in ``all_assignments`` order, list display with the
    grammar's separators), so the text is identical; it only skips re-parsing the same strings
    with TatSu and deep-copying contexts that derivation never mutates.
    """

    def __init__(self) -> None:
        import textworld.envs.pddl.textgen as textgen  # noqa: PLC0415
        from textworld.logic import Rule  # noqa: PLC0415

        self._tg = textgen
        self._rule = Rule
        self._starts: dict[str, list] = {}
        self._queries: dict[str, Any] = {}
        self._eval_globals = vars(textgen)

    def _query_rule(self, text: str) -> Any:
        rule = self._queries.get(text)
        if rule is None:
            with _PARSE_LOCK:
                rule = self._queries[text] = self._rule.parse_conjunctive_query(text)
        return rule

    def derive(self, grammar: Any, start: str, context: dict) -> str:
        tg = self._tg
        symbols = self._starts.get(start)
        if symbols is None:
            with _PARSE_LOCK:
                symbols = self._starts[start] = tg._parse_and_convert(start, rule_name="symbols")
        stack = [(sym, context) for sym in reversed(symbols)]
        out: list[str] = []
        while stack:
            sym, ctx = stack.pop()
            if isinstance(sym, tg.TerminalSymbol):
                out.append(str(sym))
            elif isinstance(sym, tg.NonterminalSymbol):
                stack.extend((s, ctx) for s in reversed(self._replace(grammar, sym, ctx)))
            elif isinstance(sym, (tg.ConditionalSymbol, tg.EvalSymbol, tg.ListSymbol)):
                stack.extend(reversed(self._expand(sym, ctx)))
            else:
                raise NotImplementedError(f"Unknown symbol: {type(sym)}")
        return "".join(out)

    def _replace(self, grammar: Any, sym: Any, ctx: dict) -> list:
        rules = grammar._rules.get(str(sym))
        if not rules:
            raise self._tg.CSGUnknownSymbolError(sym)
        state = ctx["state"]
        for rule in rules:
            if not rule.condition:
                return rule.rhs
            if any(
                True
                for _ in state.all_assignments(self._query_rule(rule.condition), ctx["mapping"])
            ):
                return rule.rhs
        raise IndexError("list index out of range")  # what upstream raises when no rule applies

    def _expand(self, sym: Any, ctx: dict) -> list:
        tg = self._tg
        if isinstance(sym, tg.EvalSymbol):
            local = dict(ctx["variables"])
            local["self"], local["context"] = sym, ctx
            return [(tg.TerminalSymbol(eval(sym.expression, self._eval_globals, local)), ctx)]
        if isinstance(sym, tg.ConditionalSymbol):
            if not sym.given:
                return [(sym.expression, _copy_ctx(ctx))]
            out = []
            infos = ctx["entity_infos"]
            for mapping in ctx["state"].all_assignments(
                self._query_rule(sym.given), ctx["mapping"]
            ):
                new = _copy_ctx(ctx)
                new["variables"].update({ph.name: infos[var.name] for ph, var in mapping.items()})
                new["mapping"].update(mapping)
                out.append((sym.expression, new))
            return out
        # ListSymbol: expand the inner symbol, then display the items as a list.
        items = (
            self._expand(sym.symbol, ctx)
            if not isinstance(sym.symbol, tg.TerminalSymbol)
            else [(sym.symbol, ctx)]
        )
        if len(items) == 0:
            return [(tg.NonterminalSymbol("list_empty"), ctx)]
        if len(items) == 1:
            return items
        sep = (tg.NonterminalSymbol("list_separator"), ctx)
        last = (tg.NonterminalSymbol("list_last_separator"), ctx)
        out = []
        for item in items[:-1]:
            out.extend((item, sep))
        out[-1] = last
        out.append(items[-1])
        return out


def _copy_ctx(ctx: dict) -> dict:
    return {
        "state": ctx["state"],
        "facts": ctx["facts"],
        "variables": dict(ctx["variables"]),
        "mapping": dict(ctx["mapping"]),
        "entity_infos": ctx["entity_infos"],
    }


_DERIVER: list = []


def _deriver() -> _Deriver:
    if not _DERIVER:
        _DERIVER.append(_Deriver())
    return _DERIVER[0]
