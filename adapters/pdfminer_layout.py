"""pdfminer.six's layout analysis with a reading order that is the same on every run.

pdfminer groups a page's text boxes by merging the closest pair first, from a heap of
(distance, id(box1), id(box2)): when two pairs are equally close, as the cells of a printed
grid of characters are, the memory addresses decide which merges first. Addresses differ
from run to run and from one file to the next in a long-lived process, so the vertical
Japanese of kampo.pdf came out in one of two orders (103 of its 2,737 lines moved), and every
citation after them with it. Here a tie goes to the pair whose boxes came first on the page,
then to the older group; nothing else of pdfminer's algorithm changes. Imported by
extract.py only when a page needs pdfminer (it is slow to import).

Written for pdfminer.six 20231228 up to 2027 (its LTLayoutContainer.group_textboxes, copied
and changed in `StablePage`): an upgrade outside that range fails tests/test_adapters.py.

Layer: adapter (adapters/): pdfminer's layout for formats/pdf.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import count

from pdfminer.converter import TextConverter
from pdfminer.layout import (
    LAParams,
    LTComponent,
    LTPage,
    LTTextBox,
    LTTextBoxVertical,
    LTTextGroup,
    LTTextGroupLRTB,
    LTTextGroupTBRL,
)
from pdfminer.pdfpage import PDFPage
from pdfminer.utils import Matrix, Plane

WRITTEN_FOR = ("pdfminer.six", "20231228", "20270101")  # distribution, from, below

Element = LTTextBox | LTTextGroup


def _area_between(obj1: LTComponent, obj2: LTComponent) -> float:
    """pdfminer's distance: the area of the rectangle around both, less their own areas."""
    x0, y0 = min(obj1.x0, obj2.x0), min(obj1.y0, obj2.y0)
    x1, y1 = max(obj1.x1, obj2.x1), max(obj1.y1, obj2.y1)
    return (x1 - x0) * (y1 - y0) - obj1.width * obj1.height - obj2.width * obj2.height


def _anything_between(plane: Plane, obj1: Element, obj2: Element) -> bool:
    x0, y0 = min(obj1.x0, obj2.x0), min(obj1.y0, obj2.y0)
    x1, y1 = max(obj1.x1, obj2.x1), max(obj1.y1, obj2.y1)
    return any(obj is not obj1 and obj is not obj2 for obj in plane.find((x0, y0, x1, y1)))


class StablePage(LTPage):
    """An LTPage whose group_textboxes breaks ties by order of appearance, not by id()."""

    def group_textboxes(self, laparams: LAParams, boxes: Sequence[LTTextBox]) -> list[LTTextGroup]:
        """pdfminer's hierarchical grouping (LTLayoutContainer.group_textboxes): merge the
        closest pair, skipping a pair with another box between them the first time it comes
        up. Heap entries are (checked, distance, rank1, rank2, obj1, obj2): a box's rank is
        its place in `boxes`, a group's the order it was made in, so entries never tie."""
        ranks = count()
        rank: dict[int, int] = {id(box): next(ranks) for box in boxes}  # only while all live

        def entry(obj1: Element, obj2: Element, checked: bool = False) -> tuple:
            return checked, _area_between(obj1, obj2), rank[id(obj1)], rank[id(obj2)], obj1, obj2

        heap = [entry(box1, box2) for i, box1 in enumerate(boxes) for box2 in boxes[i + 1 :]]
        heapq.heapify(heap)
        plane: Plane[Element] = Plane(self.bbox)
        plane.extend(boxes)
        merged: set[int] = set()  # ranks
        while heap:
            checked, _, rank1, rank2, obj1, obj2 = heapq.heappop(heap)
            if rank1 in merged or rank2 in merged:
                continue
            if not checked and _anything_between(plane, obj1, obj2):
                heapq.heappush(heap, entry(obj1, obj2, checked=True))
                continue
            vertical = (LTTextBoxVertical, LTTextGroupTBRL)
            kind = LTTextGroupTBRL if isinstance(obj1, vertical) or isinstance(obj2, vertical) \
                else LTTextGroupLRTB
            group = kind([obj1, obj2])
            rank[id(group)] = next(ranks)
            plane.remove(obj1)
            plane.remove(obj2)
            merged.update((rank1, rank2))
            for other in plane:
                heapq.heappush(heap, entry(group, other))
            plane.add(group)
        return list(plane)


class StableTextConverter(TextConverter):
    """pdfminer's TextConverter, laying pages out as StablePage."""

    def begin_page(self, page: PDFPage, ctm: Matrix) -> None:
        super().begin_page(page, ctm)
        made = self.cur_item
        self.cur_item = StablePage(made.pageid, made.bbox, made.rotate)
