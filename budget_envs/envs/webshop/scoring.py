"""WebShop's purchase reward, in two modes, and the purchase record in WebShop's field names.

``reward = r_type * (attribute hits + option hits + [price ok]) / (#attributes + #options + 1)``.

* ``exact`` (default): an attribute hits when it is one of the product's attributes, an option
  when it equals a chosen option value; ``r_type`` is 1.0 for the same product type, 0.5 for
  the same sub-category, 0.1 for the same top category, else 0.0. Right for generated data: the
  only product scoring 1.0 is the task's target.
* ``webshop``: WebShop's own semantics. Attributes hit on a token-set ratio above 85 against any
  product attribute, else on a plain substring of the lowercased title, bullet points or
  description; options pass a colour normaliser and hit on a token-set ratio above 85 (so
  "pack of 12" matches "pack of 24"); ``r_type`` comes from query match, two shared category
  segments, and the noun overlap of the two names. WebShop finds nouns with spaCy; here the nouns
  of a name are the catalogue's type-noun words and the brand (a proper noun) found in it, and for
  any other text every alphabetic word outside a small list of adjectives and stop words.

Both guard WebShop's two crashes: no goal attributes and a zero price bound (that term is dropped).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from budget_envs.envs.webshop.catalogue import ALL_TYPES, CATEGORY_SEP, Product

__all__ = [
    "SCORING_MODES",
    "indel_ratio",
    "normalize_color",
    "product_record",
    "score_item",
    "token_set_ratio",
]

SCORING_MODES = ("exact", "webshop")
_WORD = re.compile(r"[a-z0-9]+")
# Order matters: the first colour found as a substring wins ("dark grey" -> "dark").
_COLOR_SET = [
    "tan",
    "dark",
    "black",
    "white",
    "navy",
    "blue",
    "red",
    "wine",
    "grey",
    "gray",
    "beige",
    "khaki",
    "olive",
    "green",
    "pink",
    "purple",
    "brown",
    "ivory",
    "teal",
    "gold",
    "silver",
    "yellow",
    "orange",
]
_NOUN_WORDS = frozenset(w for spec in ALL_TYPES for w in _WORD.findall(spec.noun))
_NOT_NOUNS = frozenset(
    "a an and the of with for in on to by premium classic everyday ultra deluxe essential "
    "original pro signature advanced pure smart compact soft fresh elite free long short "
    "natural high low non easy fast dry fine new".split()
)


def _process(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _lcs_length(a: str, b: str) -> int:
    """Longest common subsequence length (bit-parallel, on Python integers)."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    masks: dict[str, int] = {}
    for i, ch in enumerate(a):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for ch in b:
        u = v & masks.get(ch, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - bin(v).count("1")


def indel_ratio(a: str, b: str) -> float:
    """Similarity 0-100 from the insert/delete distance: 200 * LCS / (len(a) + len(b))."""
    total = len(a) + len(b)
    if total == 0:
        return 100.0
    return 200.0 * _lcs_length(a, b) / total


def token_set_ratio(a: str, b: str) -> float:
    """Token-set fuzzy ratio 0-100 (lowercased alphanumeric words; order and repeats ignored)."""
    ta, tb = set(_process(a).split()), set(_process(b).split())
    if not ta or not tb:
        return 0.0
    common = ta & tb
    if common and (not ta - tb or not tb - ta):
        return 100.0
    sect = " ".join(sorted(common))
    diff_a = " ".join(sorted(ta - tb))
    diff_b = " ".join(sorted(tb - ta))
    comb_a = (sect + " " + diff_a).strip()
    comb_b = (sect + " " + diff_b).strip()
    best = indel_ratio(comb_a, comb_b)
    if sect:
        best = max(best, indel_ratio(sect, comb_a), indel_ratio(sect, comb_b))
    return best


def normalize_color(value: str) -> str:
    """WebShop's colour normaliser: the first colour word found as a substring, else the value."""
    for color in _COLOR_SET:
        if color in value:
            return color
    return value


def _nouns(name: str, brand: str | None = None) -> set[str]:
    words = _WORD.findall(name.lower())
    known = {w for w in words if w in _NOUN_WORDS}
    if brand is not None:
        known.add(brand.lower())
        return known
    return {w for w in words if w.isalpha() and w not in _NOT_NOUNS} | known


def product_record(p: Product) -> dict[str, Any]:
    """The product in WebShop's processed field names."""
    return {
        "asin": p.asin,
        "query": p.query,
        "product_category": p.product_category,
        "name": p.title,
        "Title": p.title,
        "Attributes": list(p.attributes),
        "BulletPoints": list(p.bullets),
        "Description": p.description,
        "Price": p.price,
        "category": p.spec.category,
        "brand": p.brand,
    }


def _type_reward(mode: str, product: dict, goal: dict, goal_brand: str | None) -> float:
    p_cat = [x.strip() for x in product["product_category"].split(CATEGORY_SEP.strip())]
    g_cat = [x.strip() for x in goal["product_category"].split(CATEGORY_SEP.strip())]
    if mode == "exact":
        if product["query"] == goal["query"]:
            return 1.0
        if p_cat[:2] == g_cat[:2]:
            return 0.5
        if p_cat[:1] == g_cat[:1]:
            return 0.1
        return 0.0
    query_match = product["query"] == goal["query"]
    category_match = len(set(p_cat) & set(g_cat)) >= 2
    bought = _nouns(product["name"], product.get("brand"))
    wanted = _nouns(goal["name"], goal_brand)
    title_score = 0.2 if not wanted else len(bought & wanted) / len(wanted)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def _attr_hit(mode: str, attr: str, product: dict) -> bool:
    if mode == "exact":
        return attr in product["Attributes"]
    if any(token_set_ratio(p_attr, attr) > 85 for p_attr in product["Attributes"]):
        return True
    return (
        attr in product["Title"].lower()
        or attr in " ".join(product["BulletPoints"]).lower()
        or attr in product["Description"].lower()
    )


def _option_hits(mode: str, wanted: Iterable[str], chosen: Iterable[str]) -> int:
    chosen = [c.lower() for c in chosen]
    hits = 0
    for g in wanted:
        g = g.lower()
        if mode == "exact":
            hits += g in chosen
            continue
        gn = normalize_color(g)
        if any(token_set_ratio(normalize_color(c), gn) > 85 for c in chosen):
            hits += 1
    return hits


def score_item(
    mode: str,
    product: dict[str, Any],
    goal: dict[str, Any],
    chosen_options: dict[str, str],
    price_ok: bool | None,
    goal_brand: str | None = None,
) -> float:
    """WebShop's reward for buying ``product`` with ``chosen_options`` against ``goal``.

    ``price_ok`` is None when the goal has no price bound (the term is then left out).
    """
    if mode not in SCORING_MODES:
        raise ValueError(f"scoring must be one of {SCORING_MODES}, got {mode!r}")
    r_type = _type_reward(mode, product, goal, goal_brand)
    attrs = list(goal["attributes"])
    wanted_options = list(goal["goal_options"])
    hits = sum(_attr_hit(mode, a, product) for a in attrs)
    hits += _option_hits(mode, wanted_options, chosen_options.values())
    denom = len(attrs) + len(wanted_options)
    if price_ok is not None:
        hits += bool(price_ok)
        denom += 1
    if denom == 0:
        return r_type
    return r_type * hits / denom
