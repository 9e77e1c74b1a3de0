# The generated corpora that bench/recall_trust.sh, bench/tune_heldout.sh and
# bench/short_queries.sh measure on (bench/RESULTS.md sections 5.6, 5.27, 5.35): dimensions
# 64-256, short to long documents, flat to strongly clustered. One entry a corpus: its
# name, then `chimera gen`'s options.
# Sourced from the repository root; also defines recall (below).
corpora=(
  "d64-short-flat    --dim 64  --docs 20000 --min-len 8   --max-len 40  --topic-weight -1  --seed 11"
  "d96-clustered     --dim 96  --docs 20000                               --topic-weight 1.5 --topics 50 --seed 12"
  "d128-long         --dim 128 --docs 6000  --min-len 100 --max-len 600                       --seed 13"
  "d200-clustered    --dim 200 --docs 10000 --min-len 8   --max-len 120 --topic-weight 1.0 --topics 80 --seed 14"
  "d256-flat         --dim 256 --docs 8000                                --topic-weight -1  --seed 15 --query-noise 0.5"
  "d96-clust-short   --dim 96  --docs 20000 --min-len 8   --max-len 60  --topic-weight 1.5 --topics 30 --query-len 16 --seed 16"
  "d80-clust-small   --dim 80  --docs 2500  --min-len 8   --max-len 60  --topic-weight 1.5 --topics 30 --query-len 16 --seed 21"
)

# Recall@K of a TREC run against an exact one: recall RUN TRUTH K, with $C the chimera
# binary of the script that sources this file.
recall() { "$C" eval --run "$1" --truth "$2" -k "$3" | awk -v k="Recall@$3" '$1 == k { print $2 }'; }
