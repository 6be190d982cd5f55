"""Multiple choice by log-likelihood (SPEC 18): the pure arithmetic (``loglik``: a choice's
log-likelihood from an echoed completion's ``logprobs``, ``acc`` and ``acc_norm`` as
lm-evaluation-harness computes them) and one identity's requests in the runner's child
(``loop``: one ``/v1/completions`` request per choice, concurrently, each through the budget).
"""
