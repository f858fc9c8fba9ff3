"""Stand-in of the vendor's Kunlun KV pools (sglang's pools, by name)."""

from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool


class KunlunMHATokenToKVPool(MHATokenToKVPool):
    pass


class KunlunMLATokenToKVPool(MLATokenToKVPool):
    pass
