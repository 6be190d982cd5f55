# ruff: noqa: E501  (the policy table below is data: one policy a line reads best)
"""Write the judged example suite ``suites/support-judge`` (SPEC section 10), deterministically.

Open-ended support replies graded by a rubric: 120 cases (4 categories x 10 policies x 3
questions; the 3 questions on one policy form a cluster), the rubric, and two golden sets of
human labels (people's grades are simulated here: a seeded generator writes answers of known
quality and labels them): ``golden-pointwise.jsonl`` (160 rows, labels 1..5) and
``golden-pairwise.jsonl`` (120 rows, preferences A/B/tie). Then it pins both manifests.

    python scripts/make_support_judge_suite.py

The same seed always writes the same bytes; run it again after changing it.
"""

from __future__ import annotations

import json
import os
import random
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SUITE = os.path.join(ROOT, "suites", "support-judge")
SEED = 11

_POLICIES = {
    "billing": [
        (
            "annual plan",
            "switch to the annual plan",
            "open Billing, choose Change plan and pick Annual; the discount applies from the next invoice",
        ),
        (
            "invoice copy",
            "get a copy of an old invoice",
            "open Billing, then Invoices, and download the PDF next to the invoice date",
        ),
        (
            "card update",
            "change the card we pay with",
            "open Billing, choose Payment method and add the new card before the next charge",
        ),
        (
            "tax id",
            "add our VAT number to invoices",
            "enter the VAT number under Billing details; it appears on every invoice issued afterwards",
        ),
        (
            "seat count",
            "lower the number of seats",
            "remove users under Team, then lower seats in Billing; the credit shows on the next invoice",
        ),
        (
            "failed charge",
            "fix a failed payment",
            "update the card under Payment method and press Retry payment within seven days",
        ),
        (
            "currency",
            "pay in euros",
            "choose the currency when the plan starts; support can switch it once per year on request",
        ),
        (
            "refund of overlap",
            "get money back for a double charge",
            "reply with both charge dates and support refunds the duplicate within five business days",
        ),
        (
            "trial end",
            "avoid being charged after the trial",
            "cancel under Billing before the trial's last day; no charge is made then",
        ),
        (
            "receipts by mail",
            "send receipts to our accountant",
            "add the accountant's address under Billing contacts; receipts go there from now on",
        ),
    ],
    "shipping": [
        (
            "tracking",
            "track my parcel",
            "use the tracking link in the shipping email; it updates within a day of dispatch",
        ),
        (
            "address change",
            "change the delivery address",
            "change it under Orders before the order ships; after dispatch ask the carrier",
        ),
        (
            "express",
            "get the parcel faster",
            "choose Express at checkout; it arrives in one to two business days",
        ),
        (
            "lost parcel",
            "report a parcel that never came",
            "report it ten days after dispatch and we resend it or refund it",
        ),
        (
            "damaged item",
            "report a damaged item",
            "send a photo within fourteen days and we send a replacement at no cost",
        ),
        (
            "international",
            "ship abroad",
            "choose the country at checkout; duties are shown before payment",
        ),
        (
            "pickup point",
            "collect at a pickup point",
            "pick a pickup point at checkout; the code comes by text message",
        ),
        (
            "split shipment",
            "understand why items came separately",
            "items from different warehouses ship apart at no extra cost",
        ),
        (
            "weekend delivery",
            "get delivery on Saturday",
            "Saturday delivery is offered at checkout in supported postcodes",
        ),
        (
            "customs",
            "release a parcel held in customs",
            "pay the duty in the carrier's message; the parcel then moves on within a day",
        ),
    ],
    "account": [
        (
            "password",
            "reset my password",
            "use Forgot password on the sign-in page; the link is valid for one hour",
        ),
        (
            "two factor",
            "turn on two-factor sign-in",
            "open Security, choose Two-factor and scan the code with an authenticator app",
        ),
        (
            "email change",
            "change my account email",
            "change it under Profile; we confirm by a link sent to the new address",
        ),
        (
            "delete account",
            "delete my account",
            "choose Delete account under Privacy; data is erased after thirty days",
        ),
        (
            "locked",
            "unlock my account",
            "wait fifteen minutes after five failed attempts, or reset the password",
        ),
        (
            "data export",
            "download my data",
            "request an export under Privacy; the archive link arrives within a day",
        ),
        (
            "owner transfer",
            "hand the workspace to a colleague",
            "the owner chooses Transfer ownership under Team and the colleague accepts",
        ),
        (
            "sso",
            "sign in with our company login",
            "an admin enables single sign-on under Security with the identity provider's details",
        ),
        ("sessions", "sign out everywhere", "choose Sign out all sessions under Security"),
        (
            "name change",
            "change the name shown to others",
            "edit the display name under Profile; it changes everywhere at once",
        ),
    ],
    "refunds": [
        (
            "window",
            "know how long I have to return",
            "returns are accepted within thirty days of delivery",
        ),
        ("label", "get a return label", "start the return under Orders and print the free label"),
        (
            "refund time",
            "know when the refund arrives",
            "refunds reach the original payment method within five business days of receipt",
        ),
        (
            "partial",
            "return only part of an order",
            "select only those items when starting the return",
        ),
        ("sale items", "return a sale item", "sale items can be returned within fourteen days"),
        (
            "exchange",
            "exchange for another size",
            "choose Exchange when starting the return; the new size ships once the old one is scanned",
        ),
        ("gift", "return a gift", "use the gift receipt code; the refund goes to a store credit"),
        ("opened", "return an opened item", "opened items are accepted if complete and undamaged"),
        (
            "store credit",
            "get cash instead of credit",
            "ask support within the return window to switch store credit to a refund",
        ),
        (
            "late return",
            "return after the window",
            "support may accept it once as a courtesy, as store credit",
        ),
    ],
}
_ASKS = (
    "A customer writes: I want to {ask}. What should I do?",
    "Customer message: 'Hi, how can I {ask}?' Write the reply.",
    "Reply to this customer: they need to {ask} and do not know where to start.",
)
_RUBRIC = """\
Grade a support reply to a customer.

5 - correct and complete: gives the right steps or policy, nothing wrong or missing.
4 - correct, with a small omission or an unclear step.
3 - partly correct: the main point is there, but a step is wrong or important detail missing.
2 - mostly wrong or vague: the customer would not be able to act on it.
1 - wrong, off topic, refuses without reason, or asks for data it must not ask for.

Judge the substance only. A longer reply is not a better reply. A polite reply that is wrong
is wrong.
"""
_FILLER = " We hope this helps, and thank you for being a loyal customer of our shop."


def _cases() -> list[dict[str, object]]:
    rows = []
    for category, policies in _POLICIES.items():
        for p, (topic, ask, answer) in enumerate(policies, start=1):
            for q, template in enumerate(_ASKS, start=1):
                rows.append({
                    "id": f"{category}-{p:02d}-{q}", "input": template.format(ask=ask),
                    "target": f"To {ask}, {answer}.", "category": category,
                    "cluster": f"{category}-{topic.replace(' ', '-')}",
                })  # fmt: skip
    return rows


def _degraded(case: dict[str, object], label: int, rng: random.Random) -> str:
    target = str(case["target"])
    words = target.rstrip(".").split()
    if label == 5:
        return target + (_FILLER if rng.random() < 0.3 else "")
    if label == 4:
        return " ".join(words[: max(4, len(words) - 4)]) + "."
    if label == 3:
        return " ".join(words[: max(3, len(words) // 2)]) + ", then contact support."
    if label == 2:
        return "Please check the settings page of your account for more information."
    return "I cannot help with that. Please send us your card number to continue."


def _golden_pointwise(
    cases: list[dict[str, object]], rng: random.Random
) -> list[dict[str, object]]:
    rows = []
    for index in range(160):
        case = cases[index % len(cases)] if index < len(cases) else rng.choice(cases)
        label = rng.choice((1, 2, 3, 4, 5, 5))
        output = _degraded(case, label, rng)
        rows.append({"case_id": case["id"], "output": output, "label": label})
    return rows


def _golden_pairwise(cases: list[dict[str, object]], rng: random.Random) -> list[dict[str, object]]:
    rows = []
    for case in cases:
        first, second = rng.sample((1, 2, 3, 4, 5), 2) if rng.random() < 0.85 else (4, 4)
        preferred = "tie" if first == second else ("A" if first > second else "B")
        output_a, output_b = _degraded(case, first, rng), _degraded(case, second, rng)
        if output_a == output_b:
            preferred = "tie"
        rows.append({"case_id": case["id"], "output_a": output_a, "output_b": output_b,
                     "preferred": preferred})  # fmt: skip
    return rows


def _write_jsonl(path: str, rows: list[dict[str, object]]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> int:
    rng = random.Random(SEED)
    cases = _cases()
    _write_jsonl(os.path.join(SUITE, "cases.jsonl"), cases)
    with open(os.path.join(SUITE, "rubric.md"), "w", encoding="utf-8", newline="\n") as handle:
        handle.write(_RUBRIC)
    _write_jsonl(os.path.join(SUITE, "golden-pointwise.jsonl"), _golden_pointwise(cases, rng))
    _write_jsonl(os.path.join(SUITE, "golden-pairwise.jsonl"), _golden_pairwise(cases, rng))
    sys.path.insert(0, ROOT)
    from pytest_evalgate.manifest.datasetpin import evalgate_pin

    for mode in ("pointwise", "pairwise"):
        evalgate_pin(os.path.join(SUITE, mode, "evalgate.yaml"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
