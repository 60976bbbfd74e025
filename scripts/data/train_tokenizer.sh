#!/usr/bin/env bash
# Trains kvserve's SentencePiece BPE tokenizer (8192 pieces) on the training split (data/spm_input.txt,
# written by build_corpus.py) with Debian's spm_train. Output: data/tokenizer/kvs8k.model (+ .vocab).
# Settings the runtime must honour: identity normalization, no dummy prefix (a document start and a
# line start tokenize alike), whitespace kept (code indentation),
# digits split one per piece, byte fallback (newline encodes as <0x0A>), unk=0 bos=1 eos=2, no pad.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p data/tokenizer
# every printable ASCII character is a piece of its own (rare ones like Q, $, ~ too)
ASCII="$(/usr/bin/python3 -c 'print("".join(chr(c) for c in range(33, 127)))')"
spm_train --input=data/spm_input.txt --model_prefix=data/tokenizer/kvs8k \
  --model_type=bpe --vocab_size=8192 --character_coverage=0.99995 --required_chars="$ASCII" \
  --split_digits=true --byte_fallback=true --normalization_rule_name=identity \
  --remove_extra_whitespaces=false --add_dummy_prefix=false --allow_whitespace_only_pieces=true \
  --max_sentence_length=65536 --input_sentence_size=600000 --shuffle_input_sentence=true \
  --random_seed=1234 --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --num_threads="$(nproc)" --minloglevel=1
echo "tokenizer: data/tokenizer/kvs8k.model"
