"""scripts/quick (scripts/quick_test.py): the quick loop chooses what a change touches."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import quick_test  # noqa: E402


def test_a_lab_module_runs_the_chapters_and_tests_that_use_it_and_no_others():
    tests, notebooks, more = quick_test.choose(["attncore/lab/serving.py"])
    assert "chapters/16_caches_in_serving.ipynb" in notebooks
    # every chapter draws its opening figure with attncore.lab.opening_figures, whose
    # function for chapter 16 alone imports serving: the other chapters are not chosen
    assert "chapters/01_what_attention_computes.ipynb" not in notebooks
    assert len(notebooks) <= 3, notebooks
    assert "tests/test_paged_and_int8.py" in tests
    assert "tests/test_softmax.py" not in tests
    assert not more


def test_a_core_module_runs_what_imports_it_through_other_modules():
    tests, notebooks, _ = quick_test.choose(["attncore/online_softmax.py"])
    # tiled.py imports online_softmax; chapter 8 uses tiled_attention
    assert "chapters/08_tiled_attention.ipynb" in notebooks
    assert "tests/test_tiled.py" in tests and "tests/test_online_softmax.py" in tests


def test_a_checker_runs_the_chapter_that_names_its_exercises():
    _, notebooks, _ = quick_test.choose(["attncore/lab/exercises/multi_head_attention.py"])
    assert notebooks and all("05_multi_head_attention" in n for n in notebooks), notebooks


def test_a_notebook_a_test_file_and_a_test_helper():
    tests, notebooks, _ = quick_test.choose(["chapters/09_backward_pass.ipynb",
                                             "tests/test_softmax.py",
                                             "tests/headless_chromium.py"])
    assert notebooks == ["chapters/09_backward_pass.ipynb"]
    assert "tests/test_softmax.py" in tests and "tests/test_jupyterlab.py" in tests
    ids = quick_test.per_notebook_ids(notebooks)
    assert ids and all("09_backward_pass" in i and "going_further" not in i for i in ids)
    assert {i.split("::")[0] for i in ids} <= set(quick_test.PER_NOTEBOOK_TESTS)


def test_the_per_notebook_files_need_no_fixture_of_conftest():
    # per_notebook_ids collects them with --noconftest: a test asking for one of conftest's
    # fixtures (a parametrized one changes the ids) would be collected otherwise there.
    def fixtures(tree: ast.Module) -> set[str]:
        return {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and any(
            "fixture" in ast.unparse(d) for d in f.decorator_list)}

    shared = fixtures(ast.parse((ROOT / "tests" / "conftest.py").read_text()))
    assert {"backend", "dtype"} <= shared
    for name in quick_test.PER_NOTEBOOK_TESTS:
        tree = ast.parse((ROOT / name).read_text())
        asked = {a.arg for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                 for a in f.args.args}
        assert not asked & shared, f"{name} uses conftest's {sorted(asked & shared)}"


def test_what_needs_the_site_or_the_whole_suite_is_named_not_run():
    tests, notebooks, more = quick_test.choose(["_ext/book_pdf.py", "tests/conftest.py"])
    assert not tests and not notebooks
    assert any("_ext/book_pdf.py" in m and "test_site" in m for m in more)
    assert any("tests/conftest.py" in m and "./scripts/test" in m for m in more)
