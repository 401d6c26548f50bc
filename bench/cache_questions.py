"""Questions for the cache hit benchmark (bench/cache_perf_hit.py), all written for it.

PAIRS: a question and a light rewording of it, the kind of repeat a cache should serve
(a synonym, a contraction, a word added or moved). Whether a rewording really is served as a
semantic hit (cosine >= 0.95 with MiniLM and no near-miss guard firing) is measured, not
assumed. FILLER: more distinct questions, stored but never asked again, so the scope holds
the 200 entries the benchmark asks for. MISS_PARTS: pieces combined into questions that are
new on every request.
"""

from __future__ import annotations

import itertools
import random

PAIRS: list[tuple[str, str]] = [
    (
        "How do I reset my router to factory settings?",
        "How can I reset my router to factory settings?",
    ),
    (
        "What is the difference between a list and a tuple in Python?",
        "What's the difference between a list and a tuple in Python?",
    ),
    (
        "How do I remove a file from a git repository?",
        "How can I remove a file from a git repository?",
    ),
    (
        "What are the health benefits of drinking green tea?",
        "What are the health benefits of green tea?",
    ),
    ("How do I change the oil in my car?", "How can I change the oil in my car?"),
    ("What is the best way to store fresh basil?", "What's the best way to store fresh basil?"),
    ("How do I clear the cache in Google Chrome?", "How can I clear the cache in Google Chrome?"),
    ("Why does my bread not rise?", "Why doesn't my bread rise?"),
    ("How do I write a unit test in JavaScript?", "How can I write a unit test in JavaScript?"),
    (
        "What is the difference between weather and climate?",
        "What's the difference between weather and climate?",
    ),
    (
        "How do I get rid of fruit flies in the kitchen?",
        "How can I get rid of fruit flies in my kitchen?",
    ),
    ("What causes the northern lights?", "What is the cause of the northern lights?"),
    (
        "How do I create a virtual environment in Python?",
        "How can I create a virtual environment in Python?",
    ),
    (
        "What is the best way to clean a cast iron pan?",
        "What's the best way to clean a cast iron pan?",
    ),
    (
        "How do I stop my dog from barking at strangers?",
        "How can I stop my dog from barking at strangers?",
    ),
    (
        "What are the main causes of climate change?",
        "What are the primary causes of climate change?",
    ),
    (
        "How do I convert a string to an integer in Java?",
        "How can I convert a string to an integer in Java?",
    ),
    ("Why do cats purr?", "Why is it that cats purr?"),
    ("How do I unclog a bathroom sink?", "How can I unclog a bathroom sink?"),
    ("What is a black hole?", "What exactly is a black hole?"),
    (
        "How do I make my laptop battery last longer?",
        "How can I make my laptop battery last longer?",
    ),
    (
        "What is the difference between an LLC and a corporation?",
        "What's the difference between an LLC and a corporation?",
    ),
    (
        "How do I keep my houseplants alive in winter?",
        "How can I keep my houseplants alive in winter?",
    ),
    (
        "What are good stretches for lower back pain?",
        "What are some good stretches for lower back pain?",
    ),
    (
        "How do I find the IP address of my computer?",
        "How can I find the IP address of my computer?",
    ),
    ("What is the greenhouse effect?", "What exactly is the greenhouse effect?"),
    (
        "How do I remove a red wine stain from a carpet?",
        "How can I remove a red wine stain from a carpet?",
    ),
    ("What is compound interest?", "What exactly is compound interest?"),
    ("How do I improve my credit score?", "How can I improve my credit score?"),
    (
        "What is the difference between baking soda and baking powder?",
        "What's the difference between baking soda and baking powder?",
    ),
    (
        "How do I set up two-factor authentication on my account?",
        "How can I set up two-factor authentication on my account?",
    ),
    ("Why is my tomato plant turning yellow?", "Why are my tomato plant's leaves turning yellow?"),
    ("How do I write a good cover letter?", "How can I write a good cover letter?"),
    (
        "What is the difference between RAM and storage?",
        "What's the difference between RAM and storage?",
    ),
    ("How do I kill a process on Linux?", "How can I kill a process on Linux?"),
    (
        "What is the best way to learn to play the guitar?",
        "What's the best way to learn to play guitar?",
    ),
    ("How do I make a sourdough starter?", "How can I make a sourdough starter?"),
    ("What are the symptoms of dehydration?", "What are the signs and symptoms of dehydration?"),
    ("How do I tie a tie?", "How can I tie a necktie?"),
    (
        "What is the difference between a virus and bacteria?",
        "What's the difference between a virus and bacteria?",
    ),
    ("How do I back up my phone?", "How can I back up my phone?"),
    ("What is an API?", "What exactly is an API?"),
    (
        "How do I prevent my glasses from fogging up?",
        "How can I prevent my glasses from fogging up?",
    ),
    ("What is the best way to memorize vocabulary?", "What's the best way to memorize vocabulary?"),
    ("How do I add a column to a table in SQL?", "How can I add a column to a table in SQL?"),
    ("Why do leaves change color in autumn?", "Why do leaves change colour in autumn?"),
    ("How do I negotiate a higher salary?", "How can I negotiate a higher salary?"),
    (
        "What is the difference between a crocodile and an alligator?",
        "What's the difference between a crocodile and an alligator?",
    ),
    ("How do I paint a room quickly?", "How can I paint a room quickly?"),
    ("What is blockchain technology?", "What exactly is blockchain technology?"),
    ("How do I reduce stress at work?", "How can I reduce stress at work?"),
    (
        "What is the best way to cook rice on the stove?",
        "What's the best way to cook rice on the stove?",
    ),
    (
        "How do I check which version of Node is installed?",
        "How can I check which version of Node is installed?",
    ),
    ("What causes hiccups?", "What is it that causes hiccups?"),
    ("How do I sharpen a kitchen knife?", "How can I sharpen a kitchen knife?"),
    (
        "What is the difference between affect and effect?",
        "What's the difference between affect and effect?",
    ),
    ("How do I start a vegetable garden?", "How can I start a vegetable garden?"),
    ("What is a recession?", "What exactly is a recession?"),
    ("How do I fix a flat bicycle tire?", "How can I fix a flat bicycle tyre?"),
    ("What is the best way to study for an exam?", "What's the best way to study for an exam?"),
    (
        "How do I open a port in the firewall on Ubuntu?",
        "How can I open a port in the firewall on Ubuntu?",
    ),
    ("Why is the ocean salty?", "Why is the sea salty?"),
    ("How do I take a screenshot on a Mac?", "How can I take a screenshot on a Mac?"),
    (
        "What is the difference between a latte and a cappuccino?",
        "What's the difference between a latte and a cappuccino?",
    ),
    ("How do I descale a kettle?", "How can I descale my kettle?"),
    ("What is quantum computing?", "What exactly is quantum computing?"),
    ("How do I deal with a difficult coworker?", "How can I deal with a difficult coworker?"),
    (
        "What is the best way to remove rust from tools?",
        "What's the best way to remove rust from tools?",
    ),
    ("How do I rename a branch in git?", "How can I rename a branch in git?"),
    ("What are the benefits of meditation?", "What are the benefits of meditating?"),
    ("How do I teach my child to ride a bike?", "How can I teach my child to ride a bike?"),
    (
        "What is the difference between stocks and bonds?",
        "What's the difference between stocks and bonds?",
    ),
    ("How do I get better at public speaking?", "How can I get better at public speaking?"),
    ("What is an index fund?", "What exactly is an index fund?"),
    ("How do I stop procrastinating?", "How can I stop procrastinating?"),
    ("What is the best way to ripen an avocado?", "What's the best way to ripen avocados?"),
    (
        "How do I write a regular expression for an email address?",
        "How can I write a regular expression for an email address?",
    ),
    ("Why do we dream?", "Why is it that we dream?"),
    ("How do I make cold brew coffee?", "How can I make cold brew coffee?"),
    (
        "What is the difference between HTTP and HTTPS?",
        "What's the difference between HTTP and HTTPS?",
    ),
    ("How do I remove mold from a shower?", "How can I remove mold from a shower?"),
    ("What is inflation in economics?", "What exactly is inflation in economics?"),
    ("How do I build a birdhouse?", "How can I build a birdhouse?"),
    (
        "What are the side effects of too much caffeine?",
        "What are the side effects of drinking too much caffeine?",
    ),
    ("How do I merge two PDF files?", "How can I merge two PDF files?"),
    (
        "What is the difference between a comet and an asteroid?",
        "What's the difference between a comet and an asteroid?",
    ),
    ("How do I train for a marathon?", "How can I train for a marathon?"),
    ("What is a neural network?", "What exactly is a neural network?"),
    ("How do I keep cut flowers fresh longer?", "How can I keep cut flowers fresh for longer?"),
    ("What is the best way to pack a suitcase?", "What's the best way to pack a suitcase?"),
    ("How do I install Python packages with pip?", "How can I install Python packages with pip?"),
    ("Why does ice float on water?", "Why is it that ice floats on water?"),
    ("How do I fix a squeaky door hinge?", "How can I fix a squeaky door hinge?"),
    (
        "What is the difference between empathy and sympathy?",
        "What's the difference between empathy and sympathy?",
    ),
    ("How do I roast vegetables in the oven?", "How can I roast vegetables in the oven?"),
    ("What is a credit union?", "What exactly is a credit union?"),
    ("How do I calm down before an interview?", "How can I calm down before an interview?"),
    (
        "What is the best way to clean windows without streaks?",
        "What's the best way to clean windows without streaks?",
    ),
    ("How do I undo changes to a file in git?", "How can I undo changes to a file in git?"),
    (
        "What are the benefits of strength training?",
        "What are the benefits of doing strength training?",
    ),
]

# Distinct from each other and from PAIRS: stored, never asked again.
_FILLER_TOPICS = [
    "the French Revolution",
    "plate tectonics",
    "the immune system",
    "supply and demand",
    "the Roman Empire",
    "photosynthesis in algae",
    "jazz music",
    "the water cycle",
    "electric cars",
    "the Renaissance",
    "coral reefs",
    "the stock market crash of 1929",
    "honey bees",
    "volcanoes",
    "the printing press",
    "public key cryptography",
    "the Silk Road",
    "antibiotic resistance",
    "wind turbines",
    "the human heart",
    "Impressionist painting",
    "tides",
    "the Cold War",
    "sleep cycles",
    "desert ecosystems",
]
_FILLER_FRAMES = [
    "Give me a short history of {}.",
    "Write three quiz questions about {}.",
    "Summarize the key facts about {} for a ten-year-old.",
    "What are the most common misconceptions about {}?",
]
FILLER: list[str] = [f.format(t) for t in _FILLER_TOPICS for f in _FILLER_FRAMES]

_MISS_SUBJECTS = [
    "a lighthouse keeper",
    "a retired astronaut",
    "a street musician",
    "a beekeeper",
    "a night-shift nurse",
    "a chess prodigy",
    "a ship's cook",
    "a mountain guide",
    "a museum guard",
    "a bakery owner",
    "a stage magician",
    "a glassblower",
]
_MISS_TASKS = [
    "a haiku about",
    "a limerick about",
    "a two-line slogan for",
    "a product name for",
    "a short toast for",
    "an apology note from",
    "a riddle about",
    "a diary entry by",
]
_MISS_TWISTS = [
    "who is afraid of pigeons",
    "on a rainy Tuesday",
    "learning to knit",
    "lost in a library",
    "meeting a talking fox",
    "running late for a wedding",
    "who collects old maps",
    "stuck in an elevator",
    "planting tulips",
    "baking for a village fair",
]


def miss_questions(seed: int = 0) -> list[str]:
    """Every combination of the miss parts (960), shuffled: a fresh question per request."""
    texts = [
        f"Write {task} {who} {twist}."
        for task, who, twist in itertools.product(_MISS_TASKS, _MISS_SUBJECTS, _MISS_TWISTS)
    ]
    random.Random(seed).shuffle(texts)
    return texts
