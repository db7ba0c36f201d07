"""A seeded product catalogue in WebShop's shape: categories, types, attributes, options, prices.

Everything is drawn from ``random.Random`` seeded with a string built from the seed, so the same
seed gives the same catalogue in any process. Generating 10,000 products takes a fraction of a
second, so the catalogue is rebuilt in memory rather than cached on disk.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

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

SIZES_FLOZ = ["2 fl oz", "4 fl oz", "6.8 fl oz", "8 fl oz", "12 fl oz", "16 fl oz", "33.8 fl oz"]
SIZES_OZ = ["1.5 ounce", "3 ounce", "5 ounce", "8 ounce", "12 ounce", "16 ounce", "24 ounce"]
PACKS = ["pack of 1", "pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12"]
COUNTS = ["30 count", "60 count", "90 count", "120 count", "180 count"]
CLOTH = ["x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large"]
SHOE = ["6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "11", "12"]
COLORS = [
    "black",
    "white",
    "navy blue",
    "light blue",
    "red",
    "wine red",
    "dark grey",
    "light grey",
    "beige",
    "khaki",
    "olive green",
    "pink",
    "purple",
    "brown",
    "ivory",
    "teal",
]
SCENTS = ["lavender", "unscented", "citrus", "vanilla", "eucalyptus", "rose", "coconut", "mint"]
FLAVORS = [
    "original",
    "chocolate",
    "vanilla",
    "strawberry",
    "sea salt",
    "honey",
    "cinnamon",
    "peanut butter",
    "lemon",
]
MATERIALS = ["oak wood", "walnut", "metal", "bamboo", "velvet", "linen", "leather", "glass"]
STYLES = ["modern", "classic", "rustic", "minimalist", "vintage", "industrial"]
CAPACITY = ["32gb", "64gb", "128gb", "256gb", "512gb"]
LENGTHS = ["3 ft", "6 ft", "10 ft", "15 ft"]
BED = ["twin", "full", "queen", "king"]


@dataclass(frozen=True)
class TypeSpec:
    """One product type: its noun, category path, attribute pool and option dimensions."""

    category: str
    path: tuple[str, ...]
    noun: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    base_price: float


def _t(category, path, noun, attributes, options, base_price):
    return TypeSpec(
        category,
        tuple(path),
        noun,
        tuple(attributes),
        tuple((k, tuple(v)) for k, v in options.items()),
        float(base_price),
    )


_HAIR = [
    "sulfate free",
    "paraben free",
    "cruelty free",
    "natural ingredients",
    "long lasting",
    "dry hair",
    "fine hair",
    "tea tree",
    "argan oil",
    "color safe",
    "hair growth",
    "vegan",
]
_SKIN = [
    "fragrance free",
    "dermatologist tested",
    "hyaluronic acid",
    "vitamin c",
    "anti aging",
    "sensitive skin",
    "non greasy",
    "oil free",
    "paraben free",
    "cruelty free",
    "vegan",
    "easy to use",
]
_SNACK = [
    "gluten free",
    "low sugar",
    "high protein",
    "non gmo",
    "keto friendly",
    "low calorie",
    "dairy free",
    "plant based",
    "individually wrapped",
    "certified organic",
    "kosher",
    "ready to eat",
]
_DRINK = [
    "caffeine free",
    "sugar free",
    "non gmo",
    "certified organic",
    "low calorie",
    "natural ingredients",
    "gluten free",
    "keto friendly",
    "zero sugar",
    "bpa free",
]
_APPAREL = [
    "machine wash",
    "moisture wicking",
    "quick drying",
    "slim fit",
    "relaxed fit",
    "long sleeve",
    "short sleeve",
    "cotton spandex",
    "button closure",
    "hand wash",
    "elastic waistband",
    "polyester spandex",
]
_SHOES = [
    "non slip",
    "rubber sole",
    "arch support",
    "memory foam",
    "lace up",
    "slip on",
    "water resistant",
    "breathable",
    "lightweight",
    "wide width",
    "anti slip",
]
_FURN = [
    "easy assemble",
    "space saving",
    "storage space",
    "solid wood",
    "living room",
    "bedroom",
    "heavy duty",
    "mid century",
    "engineered wood",
    "high density",
    "non slip",
    "easy clean",
]
_ELEC = [
    "fast charging",
    "high speed",
    "noise cancelling",
    "wireless bluetooth",
    "long battery",
    "easy install",
    "usb c",
    "water resistant",
    "hands free",
    "plug and play",
    "high definition",
    "dual band",
]

TYPES: tuple[TypeSpec, ...] = (
    # beauty
    _t(
        "beauty",
        ["Beauty & Personal Care", "Hair Care"],
        "shampoo",
        _HAIR,
        {"size": SIZES_FLOZ, "scent": SCENTS},
        14,
    ),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Hair Care"],
        "conditioner",
        _HAIR,
        {"size": SIZES_FLOZ, "scent": SCENTS},
        15,
    ),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Hair Care"],
        "hair oil",
        _HAIR,
        {"size": SIZES_FLOZ},
        18,
    ),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Skin Care"],
        "face serum",
        _SKIN,
        {"size": SIZES_FLOZ},
        24,
    ),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Skin Care"],
        "moisturizer",
        _SKIN,
        {"size": SIZES_OZ, "scent": SCENTS},
        19,
    ),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Skin Care"],
        "sunscreen",
        _SKIN,
        {"size": SIZES_FLOZ, "style": ["spf 30", "spf 50", "spf 70"]},
        13,
    ),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Makeup"],
        "lipstick",
        _SKIN,
        {"color": COLORS, "size": PACKS},
        11,
    ),
    _t("beauty", ["Beauty & Personal Care", "Makeup"], "eyeliner", _SKIN, {"color": COLORS}, 9),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Bath & Body"],
        "body wash",
        _SKIN,
        {"size": SIZES_FLOZ, "scent": SCENTS},
        10,
    ),
    _t(
        "beauty",
        ["Beauty & Personal Care", "Bath & Body"],
        "hand soap",
        _SKIN,
        {"scent": SCENTS, "size": PACKS},
        8,
    ),
    # food
    _t(
        "food",
        ["Grocery & Gourmet Food", "Snacks"],
        "protein bar",
        _SNACK,
        {"flavor": FLAVORS, "size": PACKS},
        22,
    ),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Snacks"],
        "granola",
        _SNACK,
        {"flavor": FLAVORS, "size": SIZES_OZ},
        9,
    ),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Snacks"],
        "trail mix",
        _SNACK,
        {"flavor": FLAVORS, "size": SIZES_OZ},
        12,
    ),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Snacks"],
        "beef jerky",
        _SNACK,
        {"flavor": FLAVORS, "size": PACKS},
        16,
    ),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Pantry"],
        "peanut butter",
        _SNACK,
        {"size": SIZES_OZ, "style": ["creamy", "crunchy"]},
        8,
    ),
    _t("food", ["Grocery & Gourmet Food", "Pantry"], "olive oil", _SNACK, {"size": SIZES_FLOZ}, 15),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Beverages"],
        "green tea",
        _DRINK,
        {"flavor": FLAVORS, "size": COUNTS},
        10,
    ),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Beverages"],
        "coffee beans",
        _DRINK,
        {"flavor": FLAVORS, "size": SIZES_OZ},
        17,
    ),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Beverages"],
        "sparkling water",
        _DRINK,
        {"flavor": FLAVORS, "size": PACKS},
        14,
    ),
    _t(
        "food",
        ["Grocery & Gourmet Food", "Beverages"],
        "electrolyte powder",
        _DRINK,
        {"flavor": FLAVORS, "size": COUNTS},
        25,
    ),
    # fashion
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Men"],
        "t-shirt",
        _APPAREL,
        {"color": COLORS, "size": CLOTH},
        18,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Women"],
        "blouse",
        _APPAREL,
        {"color": COLORS, "size": CLOTH},
        26,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Women"],
        "leggings",
        _APPAREL,
        {"color": COLORS, "size": CLOTH},
        21,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Men"],
        "hoodie",
        _APPAREL,
        {"color": COLORS, "size": CLOTH},
        34,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Men"],
        "jogger pants",
        _APPAREL,
        {"color": COLORS, "size": CLOTH},
        29,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Shoes"],
        "running shoes",
        _SHOES,
        {"color": COLORS, "size": SHOE},
        58,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Shoes"],
        "sandals",
        _SHOES,
        {"color": COLORS, "size": SHOE},
        32,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Shoes"],
        "boots",
        _SHOES,
        {"color": COLORS, "size": SHOE},
        79,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Accessories"],
        "socks",
        _APPAREL,
        {"color": COLORS, "size": PACKS},
        12,
    ),
    _t(
        "fashion",
        ["Clothing, Shoes & Jewelry", "Accessories"],
        "baseball cap",
        _APPAREL,
        {"color": COLORS},
        16,
    ),
    # furniture
    _t(
        "furniture",
        ["Home & Kitchen", "Furniture"],
        "bookshelf",
        _FURN,
        {"color": COLORS, "material": MATERIALS},
        89,
    ),
    _t(
        "furniture",
        ["Home & Kitchen", "Furniture"],
        "coffee table",
        _FURN,
        {"color": COLORS, "style": STYLES},
        119,
    ),
    _t(
        "furniture",
        ["Home & Kitchen", "Furniture"],
        "office chair",
        _FURN,
        {"color": COLORS, "material": MATERIALS},
        139,
    ),
    _t(
        "furniture",
        ["Home & Kitchen", "Furniture"],
        "bar stool",
        _FURN,
        {"color": COLORS, "size": PACKS, "style": STYLES},
        69,
    ),
    _t("furniture", ["Home & Kitchen", "Bedding"], "mattress topper", _FURN, {"size": BED}, 79),
    _t(
        "furniture",
        ["Home & Kitchen", "Bedding"],
        "duvet cover",
        _FURN,
        {"color": COLORS, "size": BED},
        45,
    ),
    _t(
        "furniture",
        ["Home & Kitchen", "Decor"],
        "area rug",
        _FURN,
        {"color": COLORS, "style": STYLES},
        59,
    ),
    _t(
        "furniture",
        ["Home & Kitchen", "Decor"],
        "floor lamp",
        _FURN,
        {"color": COLORS, "style": STYLES},
        49,
    ),
    # electronics
    _t(
        "electronics",
        ["Electronics", "Accessories"],
        "usb cable",
        _ELEC,
        {"color": COLORS, "size": LENGTHS},
        11,
    ),
    _t(
        "electronics",
        ["Electronics", "Accessories"],
        "phone charger",
        _ELEC,
        {"color": COLORS, "size": PACKS},
        17,
    ),
    _t("electronics", ["Electronics", "Audio"], "wireless earbuds", _ELEC, {"color": COLORS}, 39),
    _t("electronics", ["Electronics", "Audio"], "bluetooth speaker", _ELEC, {"color": COLORS}, 45),
    _t(
        "electronics",
        ["Electronics", "Storage"],
        "memory card",
        _ELEC,
        {"size": CAPACITY, "style": PACKS},
        19,
    ),
    _t(
        "electronics",
        ["Electronics", "Storage"],
        "flash drive",
        _ELEC,
        {"size": CAPACITY, "color": COLORS},
        14,
    ),
    _t("electronics", ["Electronics", "Computers"], "wireless mouse", _ELEC, {"color": COLORS}, 22),
    _t(
        "electronics",
        ["Electronics", "Computers"],
        "keyboard",
        _ELEC,
        {"color": COLORS, "style": STYLES},
        49,
    ),
    _t(
        "electronics",
        ["Electronics", "Networking"],
        "wifi router",
        _ELEC,
        {"style": ["ax1800", "ax3000", "ax5400"]},
        89,
    ),
    _t(
        "electronics",
        ["Electronics", "Camera"],
        "security camera",
        _ELEC,
        {"color": COLORS, "size": PACKS},
        59,
    ),
)

_DOG = [
    "machine washable",
    "reflective stitching",
    "chew resistant",
    "orthopedic foam",
    "puppy friendly",
    "padded handle",
    "veterinarian approved",
    "non toxic",
    "calming design",
]
_CAT = [
    "odor control",
    "clumping formula",
    "dust free",
    "scratch resistant",
    "veterinarian approved",
    "non toxic",
    "sisal rope",
    "calming design",
]
_CAMP = [
    "lightweight",
    "waterproof",
    "compact folding",
    "three season",
    "carry strap",
    "anti tear",
    "quick setup",
    "mummy shape",
]
_FIT = [
    "sweat wicking",
    "extra thick",
    "adjustable",
    "non slip",
    "rust proof",
    "tangle free",
    "carry strap",
    "home gym",
]
PET_SIZES = ["small", "medium", "large", "x-large"]
WEIGHTS = ["5 pound", "10 pound", "20 pound", "30 pound", "40 pound"]
PERSONS = ["1 person", "2 person", "4 person", "6 person"]
THICKNESS = ["4 mm", "6 mm", "8 mm", "10 mm"]
TEMPERATURE = ["20 degree", "30 degree", "40 degree", "50 degree"]

#: Product types that only the ``test_unseen`` split's catalogue holds: two categories (pet
#: supplies, sports and outdoors) that no other catalogue, and so no other split's goal, has.
UNSEEN_TYPES: tuple[TypeSpec, ...] = (
    _t("pets", ["Pet Supplies", "Dogs"], "dog leash", _DOG, {"color": COLORS, "size": LENGTHS}, 16),
    _t("pets", ["Pet Supplies", "Dogs"], "dog bed", _DOG, {"size": PET_SIZES, "color": COLORS}, 45),
    _t("pets", ["Pet Supplies", "Dogs"], "chew toy", _DOG, {"size": PET_SIZES, "style": PACKS}, 11),
    _t(
        "pets", ["Pet Supplies", "Cats"], "cat litter", _CAT, {"size": WEIGHTS, "scent": SCENTS}, 19
    ),
    _t("pets", ["Pet Supplies", "Cats"], "scratching post", _CAT, {"color": COLORS}, 35),
    _t("sports", ["Sports & Outdoors", "Camping"], "camping tent", _CAMP, {"size": PERSONS}, 89),
    _t(
        "sports",
        ["Sports & Outdoors", "Camping"],
        "sleeping bag",
        _CAMP,
        {"size": TEMPERATURE, "color": COLORS},
        49,
    ),
    _t(
        "sports",
        ["Sports & Outdoors", "Fitness"],
        "yoga mat",
        _FIT,
        {"color": COLORS, "size": THICKNESS},
        25,
    ),
    _t("sports", ["Sports & Outdoors", "Fitness"], "dumbbell set", _FIT, {"size": WEIGHTS}, 59),
    _t("sports", ["Sports & Outdoors", "Fitness"], "jump rope", _FIT, {"color": COLORS}, 12),
)
#: Every type; a product's ``type_index`` indexes this (the first ``len(TYPES)`` are TYPES).
ALL_TYPES: tuple[TypeSpec, ...] = TYPES + UNSEEN_TYPES

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
