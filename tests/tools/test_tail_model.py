"""bench/tail_model.py: the list-scheduling model behind Note [Longest tiles last]."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import tail_model as tm  # noqa: E402


def test_the_table_holds_each_documents_tiles_in_order():
    # documents [0, 1000) and [1000, 1200) at 128-row tiles, 64-key blocks; 5 * cdiv(1200, 512) entries
    assert tm.table(1200, 1000, 128, 64) == [2, 4, 6, 8, 10, 12, 14, 16, 2, 4] + [None] * 5


def test_longest_last_puts_the_longest_where_the_ctas_start():
    entries = [2, 4, 6, 2, 4, None]
    # the CTAs take entries from the last: the longest at the highest index, equal ones in order
    assert tm.longest_last(entries, 5) == [2, 2, 4, 4, 6, None]
    assert tm.longest_last(entries, 2) == entries


def test_the_tail_of_a_list_schedule():
    assert tm.tail([1.0] * 8, 4) == 0.0
    assert tm.tail([3.0, 1.0, 1.0, 1.0], 2) == 0.0                   # longest first: none
    assert tm.tail([1.0, 1.0, 1.0, 3.0], 2) == pytest.approx(100 / 3)  # the long one last: 4 against 3


def test_the_model_of_the_note():
    """The benchmark's documents grid at head dim 128 (Note [Longest tiles last]): a tail of
    about 4.3 % in the table's order, under 1.5 % with the last tiles reordered."""
    tails = list(tm.orders(8192, 1000, 128, 64, 16, 4, 264, 1.33).values())
    assert tails[0] == pytest.approx(4.3, abs=0.1)
    assert tails[1] < 1.5 and tails[2] < 1.0 and tails[3] < tails[0]


def test_the_table_without_the_causal_bound():
    # every tile of a document reaches to the document's end: [0, 1000) is 16 blocks of 64
    assert tm.table(1200, 1000, 128, 64, causal=False) == [16] * 8 + [4, 4] + [None] * 5
