"""Verifiable math problems where running code helps, generated per seed at three levels.

Why our own: each problem has an exact integer answer computed here (no dataset, no library), is cheap to make,
and is hard to do reliably in one's head but a line or two of Python: large products (level 0), modular powers and
sums (level 1), counting and prime sums over ranges (level 2). Each comes with the short program that solves it
(the SFT expert runs that program in the sandbox and answers with what it prints).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

LEVELS = (0, 1, 2)


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int
    solution: str  # Python that prints the answer


def _arithmetic(rng: random.Random) -> Problem:
    a, b, c, d, e = (rng.randint(100, 9999) for _ in range(5))
    expression = f"{a} * {b} + {c} * {d} - {e}"
    return Problem(f"Compute {expression}.", a * b + c * d - e, f"print({expression})")


def _power_sum(rng: random.Random) -> Problem:
    a, b, c = rng.randint(11, 99), rng.randint(3, 6), rng.randint(1000, 9999)
    expression = f"{a} ** {b} - {c}"
    return Problem(f"Compute {a}^{b} - {c}.", a**b - c, f"print({expression})")


def _modular_power(rng: random.Random) -> Problem:
    base, exponent, modulus = rng.randint(2, 99), rng.randint(100, 999), rng.choice([97, 101, 997, 1000, 1009, 9973])
    return Problem(f"What is the remainder when {base}^{exponent} is divided by {modulus}?",
                   pow(base, exponent, modulus), f"print(pow({base}, {exponent}, {modulus}))")


def _square_sum(rng: random.Random) -> Problem:
    n, modulus = rng.randint(100, 5000), rng.choice([7, 11, 13, 97, 101, 1000])
    return Problem(f"What is the remainder when 1^2 + 2^2 + ... + {n}^2 is divided by {modulus}?",
                   sum(i * i for i in range(1, n + 1)) % modulus,
                   f"print(sum(i * i for i in range(1, {n} + 1)) % {modulus})")


def _divisible(rng: random.Random) -> Problem:
    n = rng.randint(500, 20000)
    a, b, c = rng.sample([3, 4, 5, 6, 7, 9, 11, 13], 3)
    count = sum(1 for i in range(1, n + 1) if (i % a == 0 or i % b == 0) and i % c != 0)
    return Problem(f"How many integers from 1 to {n} are divisible by {a} or {b} but not by {c}?", count,
                   f"print(sum(1 for i in range(1, {n} + 1) if (i % {a} == 0 or i % {b} == 0) and i % {c} != 0))")


def _prime_sum(rng: random.Random) -> Problem:
    n = rng.randint(100, 5000)
    primes = [p for p in range(2, n) if all(p % q for q in range(2, int(p**0.5) + 1))]
    return Problem(f"What is the sum of all primes below {n}?", sum(primes),
                   f"print(sum(p for p in range(2, {n}) if all(p % q for q in range(2, int(p ** 0.5) + 1))))")


def _digit_sum(rng: random.Random) -> Problem:
    n, k = rng.randint(1000, 50000), rng.randint(5, 20)
    count = sum(1 for i in range(1, n + 1) if sum(map(int, str(i))) == k)
    return Problem(f"How many integers from 1 to {n} have digits that add up to {k}?", count,
                   f"print(sum(1 for i in range(1, {n} + 1) if sum(map(int, str(i))) == {k}))")


GENERATORS: dict[int, tuple[Callable[[random.Random], Problem], ...]] = {
    0: (_arithmetic, _power_sum),
    1: (_modular_power, _square_sum),
    2: (_divisible, _prime_sum, _digit_sum),
}


def problem_for(seed: int, level: int) -> Problem:
    """The problem of a seed at a level: the same seed and level always give the same problem."""
    rng = random.Random(f"code:{level}:{seed}")
    return rng.choice(GENERATORS[level])(rng)
