"""Model-written code runs here: one fresh sandbox per execution (SPEC section 11, issue 12).

A core package: it never imports pytest, never prints, never parses arguments. One job per
module, upstream first:

| module | job |
|---|---|
| ``spec`` | ``EvalgateSandboxSpec``: isolation and limits of one execution |
| ``extract`` | ``extract: fenced``: the code inside a model's answer |
| ``passk`` | the unbiased pass@k estimate of a case |
| ``tools`` | find ``bwrap``, ``unshare``, ``setpriv`` |
| ``layout`` | what the sandbox's file system shows; which interpreter runs the code |
| ``limits`` | the rlimits of one execution |
| ``commands`` | the command line that builds a bwrap, unshare or none sandbox |
| ``driver`` | the program that runs inside (code, then tests; reports on a pipe) |
| ``pipes`` | bounded reading of the sandbox's pipes on the event loop |
| ``reaper`` | kill a sandbox's process tree and wait until it is gone |
| ``outcome`` | ``EvalgateExecution`` and the outcome of what the harness observed |
| ``execute`` | ``evalgate_sandbox_run``: one execution |
| ``isolation`` | ``evalgate_sandbox_prepare``: choose and probe the isolation |

How the runner uses it (second phase of issue 12)::

    spec = await evalgate_sandbox_prepare(EvalgateSandboxSpec(**manifest_sandbox_block))
    async with budget:                        # run-wide sandbox.max_concurrency share
        code = evalgate_extract_code(answer, "fenced")
        execution = await evalgate_sandbox_run(code, case.target, spec)
    record["sandbox"] = execution.as_builtins()   # outcome, exit status, start/run times
    score = evalgate_case_pass_at_k([...passed flags of the case's repetitions...], k)

``EvalgateSandboxError`` (category ``sandbox``) from a run is an identity without a result;
``EvalgateSandboxUnavailableError`` from prepare is a configuration error (exit 4).
"""

from __future__ import annotations

from pytest_evalgate.sandbox.execute import evalgate_sandbox_run
from pytest_evalgate.sandbox.extract import EVALGATE_EXTRACT_MODES, evalgate_extract_code
from pytest_evalgate.sandbox.isolation import EVALGATE_HOW_TO_SANDBOX, evalgate_sandbox_prepare
from pytest_evalgate.sandbox.outcome import EVALGATE_OUTCOMES, EvalgateExecution
from pytest_evalgate.sandbox.passk import evalgate_case_pass_at_k, evalgate_pass_at_k
from pytest_evalgate.sandbox.spec import EVALGATE_ISOLATIONS, EvalgateSandboxSpec

__all__ = [
    "EVALGATE_EXTRACT_MODES",
    "EVALGATE_HOW_TO_SANDBOX",
    "EVALGATE_ISOLATIONS",
    "EVALGATE_OUTCOMES",
    "EvalgateExecution",
    "EvalgateSandboxSpec",
    "evalgate_case_pass_at_k",
    "evalgate_extract_code",
    "evalgate_pass_at_k",
    "evalgate_sandbox_prepare",
    "evalgate_sandbox_run",
]
