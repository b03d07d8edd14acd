"""The graph helpers of house_rules.py: the files of a tree, and the loops of an include or import graph."""
import os
from collections import deque


def files_under(root, top):
    """Paths relative to root of every file below root/top, sorted."""
    out = []
    for folder, dirs, names in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.relpath(os.path.join(folder, n), root) for n in names]
    return sorted(p.replace(os.sep, "/") for p in out)


def read_lines(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def shortest_cycle(edges, start, members):
    """The shortest path start -> ... -> start through `members` (breadth first), as a list of nodes."""
    back = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in edges.get(node, ()):
            if nxt == start:
                path = [node]
                while back[path[-1]] is not None:
                    path.append(back[path[-1]])
                return path[::-1] + [start]
            if nxt in members and nxt not in back:
                back[nxt] = node
                queue.append(nxt)
    return None


def strong_components(nodes, edges):
    """The strongly connected components (Tarjan) of the graph, each a sorted list, in node order."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        work = [(v, iter(edges.get(v, ())))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out)


def cycles(nodes, edges):
    """One shortest cycle per strongly connected component that has one, from its first node."""
    found = []
    for comp in strong_components(nodes, edges):
        members = set(comp)
        if len(comp) > 1 or comp[0] in edges.get(comp[0], ()):
            found.append((comp, shortest_cycle(edges, comp[0], members)))
    return found
