"""BalancedPlacement (TAS spec section 10): maximise the fewest slices any domain one level
below the preferred level receives, provided the request fits under one domain of the level
above it. `balanced_fit` returns None whenever Kueue would fall back to BestFit.

Kueue works on cloned subtrees. Here each candidate group is pruned in place on a working
copy of the counts and put back from a snapshot of its own subtree, so the cost stays linear
in the tree instead of a full copy per group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from daemon.placement.bestfit import leader_order, worker_order
from daemon.placement.counts import Counts, reaggregate
from daemon.placement.plan import Plan
from daemon.placement.tree import Topology

# A chosen domain set as a cons list: (domain, rest) or None for the empty set.
Chain = tuple[int, "Chain"] | None


def greedy_fit(
    counts: Counts, domains: Sequence[int], need: int, leaders: int
) -> tuple[bool, int, int | None, int | None]:
    """`evaluateGreedyAssignment`: whether BestFit's greedy walk covers the request, how many
    domains it takes, and the last leader domain and last worker domain it took. Domains
    without slices are never taken."""
    taken = 0
    last_with_leader: int | None = None
    last: int | None = None
    remaining, leaders_left = need, leaders
    sl, sl_wl, leader = counts.slice, counts.slice_wl, counts.leader
    if leaders > 0:
        ordered = leader_order(counts, domains, least_free=False)
        index = 0
        while leaders_left > 0 and index < len(ordered) and leader[ordered[index]] > 0:
            domain = ordered[index]
            taken += 1
            last_with_leader = domain
            leaders_left -= leader[domain]
            remaining -= sl_wl[domain]
            index += 1
        rest = worker_order(counts, ordered[index:], least_free=False)
    else:
        rest = worker_order(counts, domains, least_free=False)
    if leaders_left > 0:
        return False, 0, None, None
    for domain in rest:
        if remaining <= 0 or sl[domain] <= 0:
            break
        taken += 1
        last = domain
        remaining -= sl[domain]
    if remaining > 0:
        return False, 0, None, None
    return True, taken, last_with_leader, last


def _clear(topo: Topology, counts: Counts, domain: int, leader_only: bool) -> None:
    pod, pod_wl, sl, sl_wl, leader = counts.arrays()
    for d in topo.subtree((domain,)) if topo.children[domain] else (domain,):
        pod_wl[d] = sl_wl[d] = leader[d] = 0
        if not leader_only:
            pod[d] = sl[d] = 0


def _prune_domain(
    topo: Topology, counts: Counts, domain: int, threshold: int, leader_required: bool
) -> None:
    """Zero a domain below the threshold; take leader capability from one that could host
    the leader only by dropping below it."""
    if counts.slice[domain] < threshold:
        _clear(topo, counts, domain, leader_only=False)
    elif leader_required and counts.leader[domain] > 0 and counts.slice_wl[domain] < threshold:
        _clear(topo, counts, domain, leader_only=True)


def _prune(
    topo: Topology, counts: Counts, group: Sequence[int], threshold: int, plan: Plan
) -> None:
    """Prune the units, refresh the group's aggregates, then prune the group's domains too.
    When the preferred level is the slice level the units are the group's own domains."""
    leader_required = plan.leader > 0
    if plan.level < plan.slice_level:
        for domain in group:
            for child in topo.children[domain]:
                _prune_domain(topo, counts, child, threshold, leader_required)
        # Kueue recomputes the whole subtree without inner-layer rounding; without inner
        # layers that is the same as recomputing the group's domains from the pruned units.
        reaggregate(
            topo,
            counts,
            group,
            plan.slice_size,
            plan.slice_level,
            leader_required,
            shallow=not plan.inner,
        )
    for domain in group:
        _prune_domain(topo, counts, domain, threshold, leader_required)


def _entropy(counts: Counts, domains: Sequence[int]) -> float:
    """Shannon entropy of the domains' pod capacities: higher means more even."""
    pod = counts.pod
    total = sum(pod[d] for d in domains)
    if total == 0:
        return 0.0
    entropy = 0.0
    for d in domains:
        if pod[d] > 0:
            share = pod[d] / total
            entropy += -share * math.log2(share)
    return entropy


def optimal_subset(
    topo: Topology,
    counts: Counts,
    domains: Sequence[int],
    need: int,
    leaders: int,
    slice_size: int,
    by_entropy: bool,
) -> list[int] | None:
    """`selectOptimalDomainSetToFit`: exactly as many domains as the greedy walk needs, holding
    the leaders and ``need * slice_size`` pods with the least pod capacity left over. Ties keep
    the first set found scanning domains in value order (or, `by_entropy`, leader-capable and
    roomier first, then more even children first)."""
    fits, size, _, _ = greedy_fit(counts, domains, need, leaders)
    if not fits:
        return None
    if by_entropy:
        leader, sl_wl = counts.leader, counts.slice_wl
        entropy = {d: _entropy(counts, topo.children[d]) for d in domains}
        ordered = sorted(domains, key=lambda d: (-leader[d], -sl_wl[d], -entropy[d], d))
    else:
        ordered = sorted(domains)
    # states[i] maps (leaders left, pods left) to the first set of i domains reaching it.
    states: list[dict[tuple[int, int], Chain]] = [{} for _ in range(size + 1)]
    states[0][(leaders, need * slice_size)] = None
    pod, pod_wl, sl, leader = counts.pod, counts.pod_wl, counts.slice, counts.leader
    for scanned, domain in enumerate(ordered):
        if sl[domain] <= 0 and not (leaders > 0 and leader[domain] > 0):
            continue  # a domain that can take neither slices nor the leader joins no set
        # Only sets of at most `scanned` domains exist before this one is considered.
        for taken in range(min(size, scanned + 1), 0, -1):
            before = states[taken - 1]
            if not before:
                continue
            after = states[taken]
            for key in sorted(before) if len(before) > 1 else tuple(before):
                leaders_left, pods_left = key
                if leaders_left <= 0 and pods_left <= 0:
                    continue
                chain: Chain = (domain, before[key])
                if leaders_left > 0 and leader[domain] > 0:
                    after.setdefault(
                        (leaders_left - leader[domain], pods_left - pod_wl[domain]), chain
                    )
                if sl[domain] > 0:
                    after.setdefault((leaders_left, pods_left - pod[domain]), chain)
    best: Chain = None
    found = False
    for leaders_left, pods_left in sorted(states[size]):
        if leaders_left == 0 and pods_left <= 0:
            best = states[size][(leaders_left, pods_left)]
            found = True
    if not found:
        return None
    chosen: list[int] = []
    while best is not None:
        chosen.append(best[0])
        best = best[1]
    chosen.reverse()
    return chosen


def _place_evenly(
    topo: Topology, counts: Counts, units: Sequence[int], plan: Plan, threshold: int
) -> list[int] | None:
    """`placeSlicesOnDomainsBalanced`: `threshold` slices on every unit of the optimal subset,
    the surplus handed out in leader order."""
    need, leaders, slice_size = plan.need, plan.leader, plan.slice_size
    chosen = optimal_subset(topo, counts, units, need, leaders, slice_size, by_entropy=False)
    if chosen is None or need < len(chosen) * threshold:
        return None
    chosen = leader_order(counts, chosen, least_free=False)
    pod, pod_wl, sl, sl_wl, leader = counts.arrays()
    extra = need - len(chosen) * threshold
    leaders_left = leaders
    for domain in chosen:
        if leaders_left > 0:
            taken = min(sl_wl[domain] - threshold, extra)
            leader[domain] = 1
            leaders_left -= 1
        elif extra > 0:
            taken = min(sl[domain] - threshold, extra)
            leader[domain] = 0
        else:
            taken = 0
            leader[domain] = 0
        sl[domain] = sl_wl[domain] = threshold + taken
        pod[domain] = sl[domain] * slice_size
        pod_wl[domain] = pod[domain] - leader[domain]
        extra -= taken
    if extra > 0 or leaders_left > 0:
        return None
    return chosen


def balanced_fit(
    topo: Topology, counts: Counts, plan: Plan
) -> tuple[Counts, int, list[int]] | None:
    """The working counts, the fit level and the units holding their balanced share of the
    slices; None to fall back to BestFit. `counts` itself is left untouched for that."""
    level, need, leaders = plan.level, plan.need, plan.leader
    below_slice_level = level < plan.slice_level
    if level == 0:
        groups = [topo.by_level[0]]
    else:
        groups = [topo.children[parent] for parent in topo.by_level[level - 1]]
    work = counts.copy()
    best_threshold = best_size = 0
    best_group: list[int] = []
    best_numbers: list[tuple[int, int, int, int, int, int]] = []
    for group in groups:
        units = [c for d in group for c in topo.children[d]] if below_slice_level else group
        fits, taken, last_with_leader, last = greedy_fit(work, units, need, leaders)
        if not fits or taken == 0:
            continue
        threshold = need // taken
        if last_with_leader is not None:
            threshold = min(threshold, work.slice_wl[last_with_leader])
        if last is not None:
            threshold = min(threshold, work.slice[last])
        reserved = threshold
        if leaders > 0 and last is not None:
            reserved = min(threshold, work.slice_wl[last])
        if threshold <= 0 or threshold < best_threshold:
            continue
        original = work.saved(topo.subtree(group))
        _prune(topo, work, group, threshold, plan)
        fits, size, _, _ = greedy_fit(work, group, need, leaders)
        if not fits and reserved < threshold:
            # Retry once with a threshold that leaves room for the leader.
            work.restore(original)
            if reserved <= 0 or reserved < best_threshold:
                continue
            threshold = reserved
            _prune(topo, work, group, threshold, plan)
            fits, size, _, _ = greedy_fit(work, group, need, leaders)
        if fits and (
            threshold > best_threshold or (threshold == best_threshold and size < best_size)
        ):
            best_threshold, best_size, best_group = threshold, size, group
            best_numbers = work.saved(topo.subtree(group))
        work.restore(original)
    if best_threshold <= 0:
        return None
    work.restore(best_numbers)
    if below_slice_level:
        chosen = optimal_subset(
            topo, work, best_group, need, leaders, plan.slice_size, by_entropy=True
        )
        if chosen is None:
            return None
        units = [c for d in chosen for c in topo.children[d]]
        fit_level = level + 1
    else:
        units = best_group
        fit_level = level
    placed = _place_evenly(topo, work, units, plan, best_threshold)
    if placed is None:
        return None
    return work, fit_level, placed
