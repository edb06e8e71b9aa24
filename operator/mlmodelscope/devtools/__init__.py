"""Developer tools built from pinned sources into the cache (not part of the runtime package's
API): Helm for the chart's tests."""
