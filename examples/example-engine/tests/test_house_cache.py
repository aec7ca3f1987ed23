"""The engine's own tests. The conformance cases join them as items ``kvconf::CASE`` when pytest
runs with ``--kvconf-engine example-engine`` (this package's pyproject.toml sets it)."""

from kvconf_example_engine.cache import HouseCache, HouseCacheError


def test_a_published_prefix_is_found_again() -> None:
    cache = HouseCache(page_size=2, pages=8)
    pages = cache.allocate(2)
    assert cache.publish(0, [1, 2, 3, 4], pages) == (0, ())
    hit = cache.lookup(0, [1, 2, 3, 4, 5])
    assert (hit.tokens, hit.pages) == (4, tuple(pages))


def test_a_refused_call_names_its_code() -> None:
    cache = HouseCache(page_size=1, pages=2)
    try:
        cache.unpin(12345)
    except HouseCacheError as e:
        assert e.code
    else:
        raise AssertionError("unpinning a pin never taken must be refused")
