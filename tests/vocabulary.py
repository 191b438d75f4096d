"""The small vocabulary the tests build random sentences from (shared by conftest and the test modules)."""

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "man",
    "woman",
    "plays",
    "eats",
    "runs",
    "sleeps",
    "guitar",
    "food",
    "park",
    "house",
    "red",
    "big",
    "small",
    "quickly",
]
