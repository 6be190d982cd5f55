"""Inspect task over the import suite's cases (tests/data/imports/README.md)."""

from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.scorer import exact
from inspect_ai.solver import generate


@task
def evalgate_imports() -> Task:
    fields = FieldSpec(input="input", target="target", id="id", metadata=["category"])
    return Task(
        dataset=json_dataset("suite/cases.jsonl", fields),
        solver=generate(),
        scorer=exact(),
    )
