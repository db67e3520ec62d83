"""Remote storage: how cntkio reads data named by an fsspec URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``,
``hf://``, ...) — storage options per protocol, retries, where local state goes — and what it fetched.

The public face of ``cntkio._src.formats.remote``."""

from cntkio._src.formats.remote import FetchStats, RemoteSettings, configure, default_cache_dir, fetch_stats, settings

__all__ = ["FetchStats", "RemoteSettings", "configure", "default_cache_dir", "fetch_stats", "settings"]
