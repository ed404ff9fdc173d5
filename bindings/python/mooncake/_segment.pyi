# SPDX-License-Identifier: Apache-2.0
"""Type stub of the native module mooncake._segment (_segment.c)."""

from types import TracebackType
from typing import Any, Dict, List, Optional, Tuple, Type, Union

BLOB_SIZE: int
MAX_SIZE: int

def version() -> str: ...

class SegmentError(RuntimeError):
    """str() is "Code: text", upstream's form: InvalidArgument, NotImplemented or Memory."""

    errno: int
    strerror: str

class SharedSegment:
    closed: bool
    exports: int
    busy: Optional[str]
    @staticmethod
    def create(
        name: str,
        size: int,
        world_size: int,
        rank_id: int,
        owner_rank: int = ...,
        device_id: int = ...,
        mmap: bool = ...,
        host_register: bool = ...,
        hugetlb: bool = ...,
        *,
        numa_node: int = ...,
        commit_threads: int = ...,
        populate_on_import: bool = ...,
        hugetlb_page_size: int = ...,
    ) -> Tuple["SharedSegment", bytes]: ...
    @staticmethod
    def supported(mmap: bool = ..., host_register: bool = ..., hugetlb: bool = ...) -> bool: ...
    @staticmethod
    def why_unsupported(
        mmap: bool = ..., host_register: bool = ..., hugetlb: bool = ..., device_id: int = ...
    ) -> str: ...
    def complete(self, blobs: List[Union[bytes, bytearray, memoryview]]) -> None: ...
    def finish(self) -> None: ...
    def close(self) -> None: ...
    def ready(self) -> bool: ...
    def base_addr(self) -> int: ...
    def device_addr(self) -> int: ...
    def size(self) -> int: ...
    def alloc_size(self) -> int: ...
    def info(self) -> Dict[str, Any]: ...
    def facts(self) -> Dict[str, Any]: ...
    def view(self, offset: int = ..., nbytes: Optional[int] = ...) -> memoryview: ...
    def __enter__(self) -> "SharedSegment": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
