"""The narrow domain of lesson 08 (CLLM): chat requests for short Python functions — all offline.

Every task is a (name, arguments, description) triple; four request patterns turn it into four chat
prompts. Every fifth task is held out: ``train()`` never contains it, ``heldout()`` only it, so
the CLLM is measured on functions it never saw. HumanEval (``prompts.humaneval()``) is never trained
on either; ``humaneval_prompt`` asks for a HumanEval problem in the same chat form.
"""

from __future__ import annotations

import itertools
import random

# (function name, arguments, what it does: a phrase that follows "that ...")
TASKS: list[tuple[str, str, str]] = [
    ("reverse_string", "s", "returns the string s reversed"),
    ("is_palindrome", "s", "checks whether the string s reads the same backwards"),
    ("count_vowels", "s", "counts the vowels in the string s"),
    ("factorial", "n", "returns the factorial of n"),
    ("fibonacci", "n", "returns the n-th Fibonacci number"),
    ("is_prime", "n", "checks whether n is a prime number"),
    ("gcd", "a, b", "returns the greatest common divisor of a and b"),
    ("lcm", "a, b", "returns the least common multiple of a and b"),
    ("sum_list", "numbers", "returns the sum of a list of numbers"),
    ("average", "numbers", "returns the average of a list of numbers"),
    ("max_value", "numbers", "returns the largest number in a list"),
    ("min_value", "numbers", "returns the smallest number in a list"),
    ("count_words", "text", "counts the words in a string"),
    ("capitalize_words", "text", "capitalizes the first letter of every word in a string"),
    ("remove_duplicates", "items", "removes duplicates from a list while keeping the order"),
    ("flatten", "nested", "flattens a list of lists into one list"),
    ("is_even", "n", "checks whether a number is even"),
    ("celsius_to_fahrenheit", "c", "converts a temperature from Celsius to Fahrenheit"),
    ("fahrenheit_to_celsius", "f", "converts a temperature from Fahrenheit to Celsius"),
    ("square_list", "numbers", "returns the squares of a list of numbers"),
    ("filter_even", "numbers", "keeps only the even numbers of a list"),
    ("count_char", "s, ch", "counts how often the character ch appears in the string s"),
    ("is_anagram", "a, b", "checks whether two strings are anagrams of each other"),
    ("merge_dicts", "a, b", "merges two dictionaries into a new one"),
    ("invert_dict", "d", "swaps the keys and values of a dictionary"),
    ("word_frequencies", "text", "returns a dictionary counting how often each word appears in a text"),
    ("second_largest", "numbers", "returns the second largest number in a list"),
    ("binary_search", "items, target", "finds the index of target in a sorted list by binary search"),
    ("bubble_sort", "items", "sorts a list with bubble sort"),
    ("is_sorted", "items", "checks whether a list is sorted in ascending order"),
    ("chunk_list", "items, size", "splits a list into chunks of a given size"),
    ("rotate_list", "items, k", "rotates a list to the right by k positions"),
    ("digit_sum", "n", "returns the sum of the digits of n"),
    ("reverse_number", "n", "reverses the digits of an integer"),
    ("is_leap_year", "year", "checks whether a year is a leap year"),
    ("count_lines", "path", "counts the lines in a text file"),
    ("read_json", "path", "reads a JSON file and returns its content"),
    ("write_lines", "path, lines", "writes a list of strings to a file, one per line"),
    ("to_binary", "n", "converts an integer to its binary representation as a string"),
    ("from_binary", "bits", "converts a binary string to an integer"),
    ("power_set", "items", "returns all subsets of a list"),
    ("permutations", "s", "returns all permutations of a string"),
    ("common_elements", "a, b", "returns the elements that two lists have in common"),
    ("list_difference", "a, b", "returns the elements of list a that are not in list b"),
    ("longest_word", "text", "returns the longest word in a sentence"),
    ("title_case", "text", "converts a string to title case"),
    ("remove_whitespace", "s", "removes all whitespace from a string"),
    ("is_pangram", "s", "checks whether a sentence contains every letter of the alphabet"),
    ("caesar_cipher", "text, shift", "encrypts a text with a Caesar cipher"),
    ("count_upper", "s", "counts the uppercase letters in a string"),
    ("multiply_list", "numbers", "returns the product of all numbers in a list"),
    ("running_total", "numbers", "returns the running totals of a list of numbers"),
    ("find_index", "items, value", "returns the index of the first occurrence of a value in a list, or -1"),
    ("clamp", "x, low, high", "clamps a number to the range from low to high"),
    ("distance", "p, q", "returns the Euclidean distance between two points"),
    ("area_of_circle", "r", "returns the area of a circle with radius r"),
    ("is_armstrong", "n", "checks whether n is an Armstrong number"),
    ("collatz_steps", "n", "counts the steps of the Collatz sequence from n down to 1"),
    ("matrix_transpose", "matrix", "transposes a matrix given as a list of lists"),
    ("matrix_multiply", "a, b", "multiplies two matrices given as lists of lists"),
    ("dot_product", "a, b", "returns the dot product of two vectors"),
    ("normalize", "numbers", "scales a list of numbers so that they sum to one"),
    ("median", "numbers", "returns the median of a list of numbers"),
    ("mode", "numbers", "returns the most common value in a list"),
    ("variance", "numbers", "returns the variance of a list of numbers"),
    ("snake_to_camel", "name", "converts a snake_case name to camelCase"),
    ("camel_to_snake", "name", "converts a camelCase name to snake_case"),
    ("strip_punctuation", "text", "removes punctuation from a string"),
    ("is_valid_email", "address", "checks whether a string looks like a valid email address"),
    ("extract_digits", "s", "returns all the digits found in a string"),
    ("repeat_string", "s, n", "repeats a string n times with a space between the copies"),
    ("pairs_with_sum", "numbers, target", "finds all pairs of numbers in a list that add up to a target"),
    ("group_by_length", "words", "groups a list of words by their length in a dictionary"),
    ("sort_by_length", "words", "sorts a list of strings by their length"),
    ("unique_chars", "s", "checks whether all characters of a string are different"),
    ("first_non_repeated", "s", "returns the first character of a string that does not repeat"),
    ("compress_string", "s", "compresses a string by counting repeated characters, like a3b2"),
    ("zip_to_dict", "keys, values", "builds a dictionary from a list of keys and a list of values"),
    ("nth_prime", "n", "returns the n-th prime number"),
    ("primes_below", "n", "returns all prime numbers below n"),
    ("triangle_area", "a, b, c", "returns the area of a triangle from its three sides"),
    ("hours_to_seconds", "hours", "converts hours to seconds"),
    ("seconds_to_hms", "seconds", "converts a number of seconds to hours, minutes and seconds"),
    ("safe_divide", "a, b", "divides a by b and returns None when b is zero"),
    ("count_positive", "numbers", "counts the positive numbers in a list"),
    ("cumulative_max", "numbers", "returns the running maximum of a list of numbers"),
    ("interleave", "a, b", "interleaves the elements of two lists"),
    ("last_n", "items, n", "returns the last n elements of a list"),
    ("dict_from_string", "text", "parses a string like 'a=1,b=2' into a dictionary"),
    ("balanced_brackets", "s", "checks whether the brackets in a string are balanced"),
    ("gcd_list", "numbers", "returns the greatest common divisor of a list of numbers"),
    ("sum_of_squares", "n", "returns the sum of the squares of the numbers from 1 to n"),
    ("is_perfect_square", "n", "checks whether n is a perfect square"),
    ("vowel_positions", "s", "returns the positions of the vowels in a string"),
    ("replace_spaces", "s", "replaces every space in a string with an underscore"),
    ("average_word_length", "text", "returns the average length of the words in a sentence"),
    ("sum_even_fibonacci", "limit", "sums the even Fibonacci numbers below a limit"),
    ("hex_to_rgb", "color", "converts a hex color string like '#ff8800' to an RGB tuple"),
    ("days_between", "a, b", "returns the number of days between two dates"),
]

PATTERNS: list[str] = [
    "Write a Python function that {desc}.",
    "Write a Python function `{name}({args})` that {desc}.",
    'Complete this Python function:\n```python\ndef {name}({args}):\n    """{Desc}."""\n```',
    "How do I write a function in Python that {desc}?",
]


# Unit tests the course wrote for the held-out tasks: expressions about ``f``, the answer's function
# (the task's name if the answer defines it, else the last function it defines). Each must be true;
# where a request leaves a convention open (F(0) = 0 or 1, population or sample variance) both count.
HELDOUT_CHECKS: dict[str, list[str]] = {
    "fibonacci": ["f(10) in (34, 55)", "f(20) in (4181, 6765)"],
    "average": ["abs(f([1, 2, 3, 4]) - 2.5) < 1e-9", "f([5]) == 5"],
    "remove_duplicates": ["list(f([3, 1, 3, 2, 1])) == [3, 1, 2]", "list(f([])) == []"],
    "square_list": ["list(f([1, -2, 3])) == [1, 4, 9]"],
    "invert_dict": ["f({'a': 1, 'b': 2}) == {1: 'a', 2: 'b'}"],
    "is_sorted": ["f([1, 2, 2, 5])", "not f([3, 1, 2])"],
    "is_leap_year": ["f(2000)", "not f(1900)", "f(2024)", "not f(2023)"],
    "from_binary": ["f('1011') == 11", "f('0') == 0"],
    "longest_word": ["f('the quick brownish fox') == 'brownish'"],
    "count_upper": ["f('Hello World ABC') == 5", "f('abc') == 0"],
    "distance": ["abs(f((0, 0), (3, 4)) - 5) < 1e-9"],
    "matrix_multiply": ["[list(r) for r in f([[1, 2], [3, 4]], [[5, 6], [7, 8]])] == [[19, 22], [43, 50]]"],
    "variance": ["min(abs(f([2, 4, 4, 4, 5, 5, 7, 9]) - v) for v in (4, 32 / 7)) < 1e-9"],
    "extract_digits": ["''.join(map(str, f('a1b22c3'))) == '1223'"],
    "unique_chars": ["f('abc')", "not f('abca')"],
    "primes_below": ["list(f(20)) == [2, 3, 5, 7, 11, 13, 17, 19]"],
    "count_positive": ["f([1, -2, 3, 0, 5]) == 3"],
    "balanced_brackets": ["f('([]{})')", "not f('(]')", "not f('(()')"],
    "replace_spaces": ["f('a b c') == 'a_b_c'"],
}


def _render(pattern: str, task: tuple[str, str, str]) -> str:
    name, args, desc = task
    return pattern.format(name=name, args=args, desc=desc, Desc=desc[0].upper() + desc[1:])


def train(seed: int = 0) -> list[str]:
    """Chat prompts of the training tasks (4 of every 5), every pattern, shuffled with ``seed``."""
    tasks = [t for i, t in enumerate(TASKS) if i % 5 != 4]
    prompts = [_render(p, t) for t, p in itertools.product(tasks, PATTERNS)]
    random.Random(seed).shuffle(prompts)
    return prompts


def heldout() -> list[str]:
    """Chat prompts of the held-out tasks (every fifth), one pattern each in turn — never trained on."""
    return [_render(PATTERNS[i % len(PATTERNS)], t) for i, t in enumerate(heldout_tasks())]


def heldout_tasks() -> list[tuple[str, str, str]]:
    """The held-out tasks, in the order of ``heldout()``'s prompts."""
    return [t for i, t in enumerate(TASKS) if i % 5 == 4]


def humaneval_prompt(problem: dict) -> str:
    """A HumanEval problem asked in the same chat form as the training prompts."""
    return "Complete this Python function:\n```python\n" + problem["prompt"].strip("\n") + "\n```"
