"""The loopback server of the browser tests and the Lighthouse tables (scripts/loopback.py):
files as they are, or gzip-compressed text, at the root or under a subpath."""

from __future__ import annotations

import gzip
import urllib.request

import lighthouse_table
import loopback
import pytest


def _get(url: str, accept: str | None) -> tuple[bytes, str | None]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read(), response.headers.get("Content-Encoding")


def test_gzip_server_compresses_text_for_clients_that_accept_it(tmp_path):
    page = "<html><body>" + "attention " * 2000 + "</body></html>"
    (tmp_path / "page.html").write_text(page, encoding="utf8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG" + bytes(range(256)) * 8)
    with loopback.serve(tmp_path, compress=True) as base:
        body, encoding = _get(f"{base}page.html", "gzip, deflate")
        assert encoding == "gzip" and len(body) < len(page) / 10
        assert gzip.decompress(body).decode("utf8") == page
        plain, encoding = _get(f"{base}page.html", None)  # the client does not accept gzip
        assert encoding is None and plain.decode("utf8") == page
        image, encoding = _get(f"{base}image.png", "gzip")  # not text: as it is
        assert encoding is None and image == (tmp_path / "image.png").read_bytes()


def test_default_server_sends_files_as_they_are(tmp_path):
    (tmp_path / "page.html").write_text("<p>heads</p>" * 500, encoding="utf8")
    with loopback.serve(tmp_path) as base:
        body, encoding = _get(f"{base}page.html", "gzip")
        assert encoding is None and body.decode("utf8") == "<p>heads</p>" * 500


def _figures(fcp: float, lcp: float, tbt: float, cls: float, score: float) -> dict[str, float]:
    return {
        "performance": score,
        "fcp_ms": fcp,
        "lcp_ms": lcp,
        "tbt_ms": tbt,
        "cls": cls,
        "bytes": 300_000.0,
    }


def test_budget_is_applied_to_the_median_of_the_runs_not_to_one_run():
    good = _figures(1500, 2000, 100, 0.01, 0.95)
    slow = _figures(3000, 4000, 600, 0.01, 0.60)  # one noisy run
    runs = [
        {"book/preface": good, "book/x": good},
        {"book/preface": good, "book/x": slow},
        {"book/preface": good, "book/x": good},
    ]
    medians = lighthouse_table.median_run(runs)
    assert medians["book/x"]["tbt_ms"] == 100 and medians["book/x"]["performance"] == 0.95
    assert lighthouse_table.budget_misses(medians) == []
    assert lighthouse_table.misses(medians) == []


def test_budget_names_each_threshold_a_median_misses():
    over = _figures(1900, 2600, 250, 0.2, 0.85)
    medians = lighthouse_table.median_run([{"book/preface": over}] * 3)
    missed = "\n".join(lighthouse_table.budget_misses(medians))
    for name in ("FCP", "LCP", "TBT", "CLS", "performance"):
        assert f"book/preface: median {name}" in missed
    at_limit = _figures(1800, 2500, 200, 0.1, 0.9)  # "good" includes the threshold
    assert lighthouse_table.budget_misses({"book/preface": at_limit}) == []


def test_table_marks_figures_over_the_budget_and_ratios_over_the_targets():
    runs = [
        {
            "book/preface": _figures(1000, 1200, 60, 0.0, 0.99),
            "book/x": _figures(1300, 2600, 180, 0.0, 0.92),
        }
    ]
    medians = lighthouse_table.median_run(runs)
    row = lighthouse_table.run_table(medians)[-1]
    assert row.startswith("| x | 0.92 | 1.30 | 2.60 (over) | 180 | 0.000 |")
    assert row.endswith("| 3.00 (over) | 1.30 (over) |")
    assert "TBT 3.00x" in "\n".join(lighthouse_table.misses(medians))


def test_the_command_fails_on_the_budget_and_reports_the_ratios():
    fast_preface = {
        "book/preface": _figures(1000, 1200, 10, 0.0, 0.99),
        "book/x": _figures(1500, 2000, 150, 0.0, 0.95),  # within the budget, 1.5x the FCP
    }
    lines, code = lighthouse_table.verdict(lighthouse_table.median_run([fast_preface] * 3))
    assert code == 0 and "FCP 1.50x" in "\n".join(lines) and "met the budget" in lines[-1]
    slow = dict(fast_preface, **{"book/x": _figures(1900, 2000, 150, 0.0, 0.95)})
    lines, code = lighthouse_table.verdict(lighthouse_table.median_run([slow] * 3))
    assert code == 1 and "book/x: median FCP 1.9e+03 (budget <= 1800)" in "\n".join(lines)


def test_a_preface_that_hardly_blocks_is_compared_as_blocking_the_floor():
    """A ratio to a preface TBT of 0 or a few ms says nothing: the floor stands in for it."""
    run = {
        "book/preface": _figures(1000, 1200, 0, 0.0, 0.99),
        "book/x": _figures(1000, 1200, 60, 0.0, 0.99),
        "book/y": _figures(1000, 1200, 90, 0.0, 0.97),
    }
    assert lighthouse_table.ratios(run, "book/x")[0] == 60 / lighthouse_table.TBT_FLOOR_MS
    missed = lighthouse_table.misses(lighthouse_table.median_run([run]))
    assert [line.split(":")[0] for line in missed] == ["book/y"]


def test_a_site_under_a_subpath_is_served_below_its_folder_name(tmp_path):
    site = tmp_path / "mha-book"
    site.mkdir()
    (site / "index.html").write_text("<p>heads</p>", encoding="utf8")
    with loopback.serve_under_subpath(site) as url:
        assert url.endswith("/mha-book/")
        body, _ = _get(f"{url}index.html", None)
        assert body.decode("utf8") == "<p>heads</p>"


def test_serve_refuses_a_path_that_is_no_folder(tmp_path):
    with pytest.raises(ValueError, match="root must be a folder"), loopback.serve(tmp_path / "no"):
        pass
