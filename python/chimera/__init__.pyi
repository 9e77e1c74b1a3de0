# Type stubs for the chimera package (python/chimera/__init__.py holds the docstrings).
from os import PathLike
from typing import Any, Callable, Iterable, Mapping, Sequence, TypedDict

import numpy as np
import numpy.typing as npt

__version__: str

_Floats = npt.NDArray[np.float32] | npt.NDArray[np.float16]
_Docs = Sequence[_Floats] | _Floats
_Path = str | PathLike[str]
_Progress = bool | Callable[[str, float], None]
_Ids = Sequence[int] | npt.NDArray[np.integer[Any]]  # document ids, 1-d, >= 0
_Records = Iterable[Mapping[str, Any]]               # metadata records, each with an "id"
_SqlArg = str | int | float                          # bound with str(); not bool

class ChimeraError(RuntimeError): ...
class CorruptIndexError(ChimeraError): ...

class SearchParams(TypedDict, total=False):
    n_probe: int
    k_refine: int
    k_fullbit: int
    chunks: int
    impute: str  # "probe" | "zero" | "min"
    probe: str   # "auto" | "brute" | "graph"
    rerank_depth: int
    k_interaction: int
    impute_scale: float  # the probe floor's scale in (0, 1]

class UpdateReport(TypedDict):
    docs_added: int
    tokens_added: int
    docs_deleted: int
    ids_missing: int
    generation: int
    seconds: float
    assign_seconds: float
    encode_seconds: float
    write_seconds: float
    drift_below: float | None
    merged: bool
    n_docs: int       # deleted documents included
    n_deleted: int
    n_segments: int
    peak_rss_bytes: int
    assign_recall: float  # add, update: added tokens given their exact nearest centroid
    meta_records: int     # metadata records imported or upserted
    meta_repaired: int    # interrupted metadata changes replayed by this call

class _TuneResultBase(TypedDict):
    params: SearchParams
    recall: float
    qps: float
    reached: bool
    points: list[dict[str, Any]]
    saved: bool

class TuneResult(_TuneResultBase, total=False):
    heldout: dict[str, Any]  # with tune(heldout=...)

class Index:
    build_report: dict[str, Any]
    last_profile: dict[str, Any]
    def __init__(self, path: _Path, backend: str = "auto", verify: bool = False) -> None: ...
    @classmethod
    def open(cls, path: _Path, backend: str = "auto", verify: bool = False) -> Index: ...
    @classmethod
    def build(
        cls,
        path: _Path,
        documents: _Docs | None = None,
        *,
        tokens: _Floats | None = None,
        doclens: npt.ArrayLike | None = None,
        ids: npt.ArrayLike | None = None,
        bits: int = 4,
        threads: int | None = None,
        seed: int = 0,
        n_clusters: int | None = None,
        progress: _Progress = False,
        backend: str = "auto",
        rerank: str | None = None,  # "f16" | "bf16" | "f32"
        calibrate: bool = True,
    ) -> Index: ...
    def close(self) -> None: ...
    def __enter__(self) -> Index: ...
    def __exit__(self, *exc: object) -> None: ...
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def n_docs(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def info(self) -> dict[str, Any]: ...
    def ids(self) -> npt.NDArray[np.int64]: ...
    def refresh(self) -> bool: ...
    def default_params(self, k: int = 10) -> dict[str, Any]: ...
    def search(
        self,
        queries: _Docs,
        k: int = 10,
        recall: float | None = None,
        params: SearchParams | None = None,
        threads: int | None = None,
        latency: bool = False,
        subset: _Ids | Sequence[_Ids | None] | None = None,
        exclude: _Ids | None = None,
        filter: str | None = None,
        filter_args: Sequence[_SqlArg] = (),
        rerank_depth: int | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
    def tune(
        self,
        queries: _Docs,
        k: int = 10,
        target_recall: float = 0.95,
        truth: npt.ArrayLike | None = None,
        documents: _Docs | None = None,
        *,
        tokens: _Floats | None = None,
        doclens: npt.ArrayLike | None = None,
        ids: npt.ArrayLike | None = None,
        threads: int | None = None,
        save: bool = False,
        heldout: float | None = None,
        seed: int = 0,
    ) -> TuneResult: ...
    def check(self) -> None: ...

def add(
    path: _Path,
    documents: _Docs | None = None,
    *,
    tokens: _Floats | None = None,
    doclens: npt.ArrayLike | None = None,
    ids: npt.ArrayLike,
    metadata: _Path | _Records | None = None,
    no_sync: bool = False,
    lock_timeout: float | None = None,
) -> UpdateReport: ...
def update(
    path: _Path,
    documents: _Docs | None = None,
    *,
    tokens: _Floats | None = None,
    doclens: npt.ArrayLike | None = None,
    ids: npt.ArrayLike,
    missing_ok: bool = False,
    metadata: _Path | _Records | None = None,
    no_sync: bool = False,
    lock_timeout: float | None = None,
) -> UpdateReport: ...
def delete(
    path: _Path,
    ids: int | npt.ArrayLike | None = None,
    *,
    filter: str | None = None,
    filter_args: Sequence[_SqlArg] = (),
    missing_ok: bool = False,
    no_sync: bool = False,
    lock_timeout: float | None = None,
) -> UpdateReport: ...
def compact(
    path: _Path,
    *,
    recluster: bool = False,
    n_clusters: int | None = None,
    threads: int | None = None,
    seed: int = 0,
    no_sync: bool = False,
    lock_timeout: float | None = None,
    progress: _Progress = False,
) -> UpdateReport: ...
def meta_import(
    path: _Path,
    *,
    jsonl: _Path | None = None,
    csv: _Path | None = None,
    records: _Records | None = None,
    no_sync: bool = False,
    lock_timeout: float | None = None,
) -> UpdateReport: ...
def exact_search(
    documents: _Docs | tuple[_Floats, npt.ArrayLike],
    queries: _Docs,
    k: int = 10,
    *,
    ids: npt.ArrayLike | None = None,
    threads: int | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
def recall(run_ids: npt.ArrayLike, truth_ids: npt.ArrayLike, k: int) -> float: ...
def runtime_info() -> dict[str, Any]: ...

class ServerError(Exception):
    status: int
    code: str
    message: str
    details: dict[str, Any] | None
    retry_after: float

class ShardedIndex:
    generation: int
    def __init__(self, path: _Path, backend: str = "auto", verify: bool = False) -> None: ...
    @classmethod
    def open(cls, path: _Path, backend: str = "auto", verify: bool = False) -> ShardedIndex: ...
    def close(self) -> None: ...
    def __enter__(self) -> ShardedIndex: ...
    def __exit__(self, *exc: object) -> None: ...
    def __len__(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def shards(self) -> list[Index]: ...
    @property
    def n_docs(self) -> int: ...
    @property
    def dim(self) -> int: ...
    def refresh(self) -> list[bool]: ...
    def search(
        self,
        queries: _Docs,
        k: int = 10,
        params: SearchParams | None = None,
        threads: int | None = None,
        latency: bool = False,
        subset: npt.ArrayLike | Sequence[npt.ArrayLike] | None = None,
        exclude: npt.ArrayLike | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...

class Client:
    url: str
    last_profile: dict[str, Any] | None
    def __init__(self, url: str = ..., api_key: str | None = None, timeout: float = 60.0,
                 busy_retries: int = 3) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Client: ...
    def __exit__(self, *exc: object) -> None: ...
    def health(self) -> dict[str, Any]: ...
    def indexes(self) -> list[dict[str, Any]]: ...
    def info(self, index: str) -> dict[str, Any]: ...
    def metrics(self) -> str: ...
    def search(
        self,
        index: str,
        queries: _Docs,
        k: int = 10,
        *,
        recall: float | None = None,
        params: SearchParams | None = None,
        subset: npt.ArrayLike | Sequence[npt.ArrayLike] | None = None,
        exclude: npt.ArrayLike | None = None,
        filter: str | None = None,
        filter_args: Sequence[str | int | float] | None = None,
        profile: bool = False,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
    def add(
        self,
        index: str,
        documents: _Docs | None = None,
        *,
        tokens: _Floats | None = None,
        doclens: npt.ArrayLike | None = None,
        ids: npt.ArrayLike,
        metadata: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> dict[str, Any]: ...
    def update(
        self,
        index: str,
        documents: _Docs | None = None,
        *,
        tokens: _Floats | None = None,
        doclens: npt.ArrayLike | None = None,
        ids: npt.ArrayLike,
        metadata: Sequence[Mapping[str, Any] | None] | None = None,
        missing_ok: bool = False,
    ) -> dict[str, Any]: ...
    def delete(
        self,
        index: str,
        ids: npt.ArrayLike | None = None,
        *,
        filter: str | None = None,
        filter_args: Sequence[str | int | float] | None = None,
        missing_ok: bool = False,
    ) -> dict[str, Any]: ...
