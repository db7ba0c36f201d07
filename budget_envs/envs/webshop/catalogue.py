"""A seeded product catalogue in WebShop's shape: categories, types, attributes, options, prices.

Everything is drawn from ``random.Random`` seeded with a string built from the seed, so the same
seed gives the same catalogue in any process. Generating 10,000 products takes a fraction of a
second, so the catalogue is rebuilt in memory rather than cached on disk. The product types it
draws from are the table of :mod:`budget_envs.envs.webshop.product_types` (importable from here).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from budget_envs.envs.webshop.product_types import (
    ALL_TYPES,
    COLORS,
    TYPES,
    UNSEEN_TYPES,
    TypeSpec,
)

__all__ = [
    "ALL_TYPES",
    "CATALOGUE_VERSION",
    "CATEGORY_SEP",
    "COLORS",
    "Product",
    "TypeSpec",
    "TYPES",
    "UNSEEN_TYPES",
    "generate_catalogue",
]

#: Bumped whenever the generator's output changes for a given seed.
CATALOGUE_VERSION = 1
#: WebShop's category path separator (U+203A).
CATEGORY_SEP = " \u203a "

_SYLL_A = [
    "lu",
    "ma",
    "ve",
    "ko",
    "ra",
    "ti",
    "no",
    "sa",
    "be",
    "zo",
    "fi",
    "da",
    "mi",
    "qu",
    "el",
    "or",
    "an",
    "ca",
    "pe",
    "ha",
]
_SYLL_B = [
    "ra",
    "lo",
    "ni",
    "va",
    "ex",
    "ta",
    "mo",
    "ri",
    "na",
    "co",
    "li",
    "sto",
    "ven",
    "dor",
    "lex",
    "mar",
    "tis",
    "nova",
    "gen",
    "ly",
]
_ADJ = [
    "premium",
    "classic",
    "everyday",
    "ultra",
    "deluxe",
    "essential",
    "original",
    "pro",
    "signature",
    "advanced",
    "pure",
    "smart",
    "compact",
    "soft",
    "fresh",
    "elite",
]
_FILLER = [
    "Designed for daily use at home, at work and on the go.",
    "Backed by a satisfaction promise from the maker.",
    "Ships in recyclable packaging.",
    "Thoughtfully made and quality checked before it leaves the factory.",
    "A reliable pick for gifts and everyday needs.",
    "Made to last through years of regular use.",
]
_REVIEW = [
    ("Exactly what I wanted, would buy again.", 5),
    ("Good value for the price.", 4),
    ("Works as described, nothing special.", 3),
    ("Arrived quickly and well packed.", 5),
    ("Not bad, but the size ran a bit off for me.", 3),
    ("Stopped liking it after a few weeks.", 2),
    ("Great quality, my family loves it.", 5),
    ("Decent, though the description oversells it.", 3),
]


@dataclass
class Product:
    """One catalogue product (fields named as in WebShop's processed products)."""

    asin: str
    type_index: int
    title: str
    brand: str
    attributes: list[str]
    title_attributes: list[str]
    options: dict[str, list[str]]
    price: float
    bullets: list[str]
    description: str
    reviews: list[tuple[int, str]] = field(default_factory=list)
    rating: float | None = None

    @property
    def spec(self) -> TypeSpec:
        """The product's type."""
        return ALL_TYPES[self.type_index]

    @property
    def product_category(self) -> str:
        """WebShop's category path, e.g. ``Beauty & Personal Care › Hair Care › Shampoo``."""
        return CATEGORY_SEP.join(self.spec.path + (self.spec.noun.title(),))

    @property
    def query(self) -> str:
        """The collection query of the product (WebShop's ``query`` field): its type noun."""
        return self.spec.noun


def _brand_names(rng: random.Random, n: int) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n:
        name = rng.choice(_SYLL_A) + rng.choice(_SYLL_B) + rng.choice(["", "a", "o", "is", "ix"])
        if name not in seen and len(name) >= 4:
            seen.add(name)
            names.append(name.capitalize())
    return names


def _asin(rng: random.Random, seen: set[str]) -> str:
    alphabet = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in seen:
            seen.add(asin)
            return asin


def _price(rng: random.Random, base: float) -> float:
    value = base * rng.lognormvariate(0.0, 0.45)
    return round(max(2.0, round(value)) - rng.choice([0.01, 0.01, 0.05, 0.51]), 2)


def generate_catalogue(
    seed: int, num_products: int = 10_000, unseen_types: bool = False
) -> list[Product]:
    """Generate ``num_products`` products from ``seed`` (deterministic in any process).

    The products cycle through :data:`TYPES`, or with ``unseen_types`` through
    :data:`ALL_TYPES` (the ``test_unseen`` catalogue: the usual types plus
    :data:`UNSEEN_TYPES`)."""
    types = ALL_TYPES if unseen_types else TYPES
    rng = random.Random(f"budgetmix-webshop-catalogue:{CATALOGUE_VERSION}:{seed}")
    brands = _brand_names(rng, 320)
    seen: set[str] = set()
    products: list[Product] = []
    for i in range(num_products):
        type_index = i % len(types)
        spec = types[type_index]
        brand = rng.choice(brands)
        n_attr = rng.randint(3, 5)
        attributes = rng.sample(list(spec.attributes), n_attr)
        n_title = rng.randint(0, 2)
        title_attributes = attributes[:n_title]
        options: dict[str, list[str]] = {}
        n_dims = rng.randint(1, len(spec.options)) if spec.options else 0
        for dim, values in spec.options[:n_dims]:
            k = rng.randint(2, min(6, len(values)))
            chosen = set(rng.sample(list(values), k))
            options[dim] = [v for v in values if v in chosen]
        adjective = rng.choice(_ADJ)
        words = [brand, adjective.capitalize()]
        words += [a.title() for a in title_attributes]
        words.append(spec.noun.title())
        title = " ".join(words)
        if options and rng.random() < 0.5:
            dim = next(iter(options))
            title += f", {len(options[dim])} {dim} choices"
        price = _price(rng, spec.base_price)
        bullets = []
        shown = [a for a in attributes if a not in title_attributes]
        # Some attributes appear only on the Attributes sub-page, never in the features.
        in_bullets = shown[: rng.randint(0, len(shown))]
        for attr in in_bullets:
            bullets.append(f"{attr.upper()}: this {spec.noun} is {attr}, as promised by {brand}.")
        bullets += rng.sample(_FILLER, 2)
        rng.shuffle(bullets)
        description = (
            f"The {brand} {adjective} {spec.noun} belongs to our {spec.path[-1].lower()} range. "
            f"{rng.choice(_FILLER)} {rng.choice(_FILLER)}"
        )
        reviews = [(score, text) for text, score in rng.sample(_REVIEW, rng.randint(0, 3))]
        rating = round(sum(s for s, _ in reviews) / len(reviews), 1) if reviews else None
        products.append(
            Product(
                asin=_asin(rng, seen),
                type_index=type_index,
                title=title,
                brand=brand,
                attributes=attributes,
                title_attributes=title_attributes,
                options=options,
                price=price,
                bullets=bullets,
                description=description,
                reviews=reviews,
                rating=rating,
            )
        )
    return products
