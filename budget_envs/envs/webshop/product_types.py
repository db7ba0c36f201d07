"""The web shop's product types: each type's category path, noun, attribute pool and options.

:data:`TYPES` are the types of every catalogue; :data:`UNSEEN_TYPES` only the ``test_unseen``
split's (categories no other split's goal has); a product's ``type_index`` indexes
:data:`ALL_TYPES`. Changing a row changes the catalogue a seed gives: bump
:data:`~budget_envs.envs.webshop.catalogue.CATALOGUE_VERSION` with it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ALL_TYPES", "COLORS", "TYPES", "UNSEEN_TYPES", "TypeSpec"]

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
