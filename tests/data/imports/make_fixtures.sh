#!/usr/bin/env bash
# Re-make the harness fixtures of tests/data/imports (see README.md). Run from the repository
# root: bash tests/data/imports/make_fixtures.sh
#   EVALGATE    the project's evalgate console script    (default: .venv/bin/evalgate)
#   PYTHON      the project's python                     (default: .venv/bin/python)
#   HARNESS_VENV a throwaway venv with lm-eval 0.4.13 and inspect-ai 0.3.285 (never the project's)
set -euo pipefail
EVALGATE="${EVALGATE:-.venv/bin/evalgate}"
PYTHON="${PYTHON:-.venv/bin/python}"
: "${HARNESS_VENV:?set HARNESS_VENV to a venv holding lm-eval and inspect-ai}"
here=tests/data/imports
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

"$PYTHON" - "$here/suite/evalgate.yaml" "$work/key.jsonl" <<'PY'
import sys
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated import evalgate_write_answer_key
manifest = evalgate_load_manifest(sys.argv[1])
rows = ((c.evalgate_prompt_json(), c.target, c.category) for c in manifest.cases)
evalgate_write_answer_key(sys.argv[2], rows)
PY

serve() {  # ACCURACY -> sets url: the base URL of a simulator answering with that accuracy
    local fifo
    fifo="$(mktemp -u "$work/ready-XXXXXX")"
    mkfifo "$fifo"
    "$EVALGATE" serve --port 0 --answers "$work/key.jsonl" --accuracy "$1" --seed 1 \
        --parent-pid $$ >"$fifo" &
    read -r line <"$fifo"
    url="${line##* }"
}

lm_eval_run() {  # NAME ACCURACY
    serve "$2"
    "$HARNESS_VENV/bin/lm_eval" --model local-chat-completions \
        --model_args "base_url=$url/chat/completions,model=sim,num_concurrent=4,max_retries=1,tokenized_requests=False" \
        --apply_chat_template --include_path "$here/lm_eval_task" --tasks evalgate_imports \
        --log_samples --output_path "$work/lm-$1" >"$work/lm-$1.log" 2>&1 || { cat "$work/lm-$1.log" >&2; exit 1; }
    cp "$(ls "$work"/lm-"$1"/*/samples_evalgate_imports_*.jsonl)" "$here/lm_eval/$1/"
    cp "$(ls "$work"/lm-"$1"/*/results_*.json)" "$here/lm_eval/$1/"
}

inspect_run() {  # NAME ACCURACY
    serve "$2"
    (cd "$here" && OPENAI_BASE_URL="$url" OPENAI_API_KEY=x \
        "$HARNESS_VENV/bin/inspect" eval inspect_task.py --model openai/sim -M responses_api=false --epochs 2 \
        --log-dir "$work/inspect-$1" --display none) >"$work/inspect-$1.log" 2>&1 \
        || { cat "$work/inspect-$1.log" >&2; exit 1; }
    cp "$(ls "$work"/inspect-"$1"/*.eval)" "$here/inspect/$1.eval"
}

for name in baseline same regressed; do
    rm -rf "${here:?}/lm_eval/$name"
    mkdir -p "$here/lm_eval/$name" "$here/inspect"
done
# baseline and same: two runs at one accuracy (same model, same draws: equal models);
# regressed: a clearly worse model.
lm_eval_run baseline 0.85
lm_eval_run same 0.85
lm_eval_run regressed 0.5
inspect_run baseline 0.85
inspect_run same 0.85
inspect_run regressed 0.5
