"""Task queues for the policies: FIFO among equals (default) or the article's exact binary heap."""

from __future__ import annotations

from collections import deque


class FifoQueue(deque):
    """Submission order. O(1) push and pop; a deque, so truth tests and `take` cost no Python call."""

    __slots__ = ()

    def __init__(self, priority: int = 0):
        super().__init__()

    push = deque.append
    push_front = deque.appendleft  # ahead of every waiting item (an evicted task, queued again)
    take = deque.popleft  # the oldest item; only on a non-empty queue

    def pop(self):
        """The oldest item, or None when empty."""
        return self.popleft() if self else None

    def remove(self, item) -> bool:
        """Take a waiting item out (a cancelled request); False if it is not here. O(n), cancellations only."""
        try:
            deque.remove(self, item)
        except ValueError:
            return False
        return True


class SeedHeap:
    """The article's `PriorityQueue`, sift rules included.

    Push appends and sifts up while the parent's priority is strictly greater; pop moves the last element
    to the root and sifts down only to a strictly smaller child. Among equal priorities this pops the first
    item, then the most recently pushed ones: the LIFO-ish order the reference documents.
    """

    __slots__ = ("_heap", "_priority")

    def __init__(self, priority: int = 0):
        self._heap: list[tuple[int, object]] = []
        self._priority = priority

    def push(self, item, priority: int | None = None) -> None:
        heap = self._heap
        heap.append((self._priority if priority is None else priority, item))
        i = len(heap) - 1
        while i > 0:
            parent = (i - 1) // 2
            if heap[parent][0] <= heap[i][0]:
                break
            heap[parent], heap[i] = heap[i], heap[parent]
            i = parent

    def push_front(self, item) -> None:
        """Ahead of this queue's items: one priority step above them (an evicted task, queued again)."""
        self.push(item, self._priority - 1)

    def take(self):
        return self.pop()

    def __iter__(self):
        return (item for _, item in self._heap)

    def pop(self):
        heap = self._heap
        if not heap:
            return None
        top = heap[0]
        last = heap.pop()
        if heap:
            heap[0] = last
            self._sink(0)
        return top[1]

    def remove(self, item) -> bool:
        """Take a waiting item out (a cancelled request): the last element fills its place and is sifted
        by the same rules as push and pop. False if it is not here."""
        heap = self._heap
        for i, (_, it) in enumerate(heap):
            if it is item:
                break
        else:
            return False
        last = heap.pop()
        if i < len(heap):
            heap[i] = last
            self._sink(i)
            while i > 0:
                parent = (i - 1) // 2
                if heap[parent][0] <= heap[i][0]:
                    break
                heap[parent], heap[i] = heap[i], heap[parent]
                i = parent
        return True

    def _sink(self, i: int) -> None:
        heap = self._heap
        n = len(heap)
        while True:
            smallest = i
            left, right = 2 * i + 1, 2 * i + 2
            if left < n and heap[left][0] < heap[smallest][0]:
                smallest = left
            if right < n and heap[right][0] < heap[smallest][0]:
                smallest = right
            if smallest == i:
                return
            heap[i], heap[smallest] = heap[smallest], heap[i]
            i = smallest

    def __len__(self) -> int:
        return len(self._heap)


def make_queue(tie_break: str, priority: int):
    """Interactive queues get priority 0 and batch queues 10, as in the article."""
    return (SeedHeap if tie_break == "seed-heap" else FifoQueue)(priority)
