"""Stand-in of the vendor's paged allocator (sglang's, by name)."""

from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator


class KunlunPagedTokenToKVPoolAllocator(PagedTokenToKVPoolAllocator):
    pass
