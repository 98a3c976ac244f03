import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _forecast_fixtures():
    spec = importlib.util.spec_from_file_location("_forecast_conftest", ROOT / "tests/engine/forecast/conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def pa_data(tmp_path):
    """A small Prophet Arena CSV folder in the upstream format (12 questions, 2 categories)."""
    fc = _forecast_fixtures()
    folder = tmp_path / "pa"
    folder.mkdir()
    rows = [fc.make_row(f"s{i}", snapshot=f"2025-08-{i + 1:02d}T12:00:00+00:00") for i in range(8)]
    rows += [fc.make_row(f"e{i}", category="Economics", markets=("Above 2%", "Above 3%"), outcome=(1, 0),
                         quotes=((80, 82), (10, 12)), snapshot=f"2025-09-{i + 1:02d}T12:00:00+00:00")
             for i in range(4)]
    fc.write_csv(folder / "subset_data_Sports_8.csv", rows[:8])
    fc.write_csv(folder / "subset_data_Economics_4.csv", rows[8:])
    return folder
