"""Phase 2 of BestFit and LeastFreeCapacity (TAS spec sections 5, 6, 9 and 11).

Every function works on the flat per-domain lists of `Counts`; a list of domains is a list of
domain numbers, and a domain number doubles as the "values ascending" tie-break.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from daemon.placement import reasons
from daemon.placement.counts import MAX_PODS, Counts
from daemon.placement.plan import Plan
from daemon.placement.reasons import Exclusions
from daemon.placement.tree import Topology


def worker_order(counts: Counts, domains: Iterable[int], least_free: bool) -> list[int]:
    """`sortedDomains`: slices descending (ascending for LeastFreeCapacity), then pods
    ascending (least leftover first), then values."""
    sl, pod = counts.slice, counts.pod
    if least_free:
        return sorted(domains, key=lambda d: (sl[d], pod[d], d))
    return sorted(domains, key=lambda d: (-sl[d], pod[d], d))


def leader_order(counts: Counts, domains: Iterable[int], least_free: bool) -> list[int]:
    """`sortedDomainsWithLeader`: leader-capable first, then the worker order applied to the
    with-leader numbers."""
    leader, sl_wl, pod_wl = counts.leader, counts.slice_wl, counts.pod_wl
    sign = 1 if least_free else -1
    return sorted(domains, key=lambda d: (-leader[d], sign * sl_wl[d], pod_wl[d], d))


def best_fit(
    domains: Sequence[int],
    start: int,
    need: int,
    capacity: Sequence[int],
    leader: Sequence[int],
    leaders_needed: int,
) -> int:
    """The earliest domain from `start` on with the smallest capacity that still holds `need`
    (and a leader, when one is needed); the domain at `start` when none does."""
    best = -1
    best_capacity = MAX_PODS
    for index in range(start, len(domains)):
        domain = domains[index]
        if leader[domain] < leaders_needed:
            continue
        have = capacity[domain]
        if need <= have < best_capacity:
            best, best_capacity = domain, have
    return best if best >= 0 else domains[start]


def prioritize_leader_domain(
    counts: Counts, domains: list[int], count: int, leaders: int, slice_size: int, slices: bool
) -> list[int]:
    """Move to the front the first leader-capable domain whose leader penalty still leaves
    the list enough room for every worker, so the leader does not eat worker capacity the
    aggregated numbers promised (Kueue's `prioritizeLeaderDomain`)."""
    if leaders == 0 or len(domains) < 2:
        return domains
    if slices:
        required = count // slice_size
        primary, with_leader = counts.slice, counts.slice_wl
    else:
        required = count
        primary, with_leader = counts.pod, counts.pod_wl
    available = sum(primary[d] for d in domains)
    leader = counts.leader
    for index, domain in enumerate(domains):
        if leader[domain] < leaders:
            continue
        if available - (primary[domain] - with_leader[domain]) < required:
            continue
        if index == 0:
            return domains
        return [domain, *domains[:index], *domains[index + 1 :]]
    return domains


def distribute(
    counts: Counts,
    domains: list[int],
    count: int,
    leaders: int,
    slice_size: int,
    least_free: bool,
    slices: bool,
) -> list[int] | None:
    """`updateCountsToMinimumGeneric`: hand out `count` pods (in slices of `slice_size` when
    `slices`) and `leaders` over `domains` in list order, overwriting each chosen domain's
    numbers with what it gets. BestFit swaps the domain that can finish the job for the
    tightest one that can. None when the domains run out first."""
    domains = prioritize_leader_domain(counts, domains, count, leaders, slice_size, slices)
    pod, leader = counts.pod, counts.leader
    if slices:
        primary, with_leader = counts.slice, counts.slice_wl
        remaining = count // slice_size
        unit = slice_size
    else:
        primary, with_leader = pod, counts.pod_wl
        remaining = count
        unit = 1
    best = not least_free
    leaders_left = leaders
    result: list[int] = []
    for index, domain in enumerate(domains):
        if leaders_left > 0:
            if best and with_leader[domain] >= remaining and leader[domain] >= leaders_left:
                domain = best_fit(domains, index, remaining, with_leader, leader, leaders_left)
            result.append(domain)
            if with_leader[domain] >= remaining and leader[domain] >= leaders_left:
                primary[domain] = remaining
                leader[domain] = leaders_left
                pod[domain] = remaining * unit
                return result
            taken = min(with_leader[domain], remaining)
            with_leader[domain] = taken
            leader[domain] = min(leader[domain], leaders_left)
            primary[domain] = taken
            pod[domain] = taken * unit
            leaders_left -= leader[domain]
            remaining -= taken
            continue
        if best and primary[domain] >= remaining:
            domain = best_fit(domains, index, remaining, primary, leader, 0)
        leader[domain] = 0
        result.append(domain)
        if primary[domain] >= remaining:
            primary[domain] = remaining
            pod[domain] = remaining * unit
            return result
        pod[domain] = primary[domain] * unit
        remaining -= primary[domain]
    return None


def not_fit_reason(
    topo: Topology, counts: Counts, plan: Plan, level: int, fit: int, exclusions: Exclusions
) -> str:
    """The not-fit message; per layer when the request has several slice layers, computed on
    the level's domain with the most slices (ties to the smaller domain id)."""
    if not plan.layers:
        return reasons.not_fit(fit, plan.need, plan.slice_size, exclusions)
    sl = counts.slice
    best = min(topo.by_level[level], key=lambda d: (-sl[d], topo.domain_id(d)))
    # Whole slices per domain of the layer's level, not over the pooled pods.
    layers = [
        (topo.levels[layer], _slices_at(topo, counts, best, level, layer, size), plan.count // size)
        for layer, size in plan.layers
    ]
    return reasons.multi_layer_not_fit(layers, exclusions)


def _slices_at(
    topo: Topology, counts: Counts, root: int, level: int, target: int, size: int
) -> int:
    pod = counts.pod
    return sum(pod[d] // size for d in _domains_at(topo, root, level, target))


def _domains_at(topo: Topology, root: int, level: int, target: int) -> list[int]:
    frontier = [root]
    for _ in range(level, target):
        frontier = [child for domain in frontier for child in topo.children[domain]]
    return frontier


def find_fit_domains(
    topo: Topology, counts: Counts, plan: Plan, exclusions: Exclusions
) -> tuple[int, list[int]] | str:
    """Phase 2a (`findLevelWithFitDomains`): the fit level and the domains there that take
    the whole request, climbing one level at a time for preferred requests and spreading
    greedily at the top (or, unconstrained, at the search level)."""
    need, leaders, least_free = plan.need, plan.leader, plan.least_free
    best = not least_free
    sl, sl_wl, leader = counts.slice, counts.slice_wl, counts.leader
    level = plan.level
    while True:
        domains = topo.by_level[level]
        if not domains:
            return reasons.no_domains(topo.levels[level])
        ordered = leader_order(counts, domains, least_free)
        top = ordered[0]
        if best and sl_wl[top] >= need and leader[top] >= leaders:
            top = best_fit(ordered, 0, need, sl_wl if leaders else sl, leader, leaders)
        if least_free:
            capacity = sl_wl if leaders else sl
            for domain in ordered:
                if leader[domain] >= leaders and capacity[domain] >= need:
                    return level, [domain]
            if plan.required:
                # Kueue reports a pod count here (dead code at its default gates); the most
                # slices any domain holds keeps the message in the unit it names.
                most = max(sl[d] for d in ordered)
                return not_fit_reason(topo, counts, plan, level, most, exclusions)
        if sl_wl[top] >= need and leader[top] >= leaders:
            return level, [top]
        if plan.required:
            return not_fit_reason(topo, counts, plan, level, sl[top], exclusions)
        if level > 0 and not plan.unconstrained:
            level -= 1
            continue
        return _spread(topo, counts, plan, level, ordered, exclusions)


def _spread(
    topo: Topology,
    counts: Counts,
    plan: Plan,
    level: int,
    ordered: list[int],
    exclusions: Exclusions,
) -> tuple[int, list[int]] | str:
    """Several domains at `level`: leaders first from domains that keep worker room, then
    workers in worker order until the slices are covered."""
    need, least_free = plan.need, plan.least_free
    best = not least_free
    sl, sl_wl, leader = counts.slice, counts.slice_wl, counts.leader
    ordered = prioritize_leader_domain(
        counts, ordered, plan.count, plan.leader, plan.slice_size, True
    )
    result: list[int] = []
    remaining, leaders_left = need, plan.leader
    index = 0
    while leaders_left > 0 and index < len(ordered) and leader[ordered[index]] > 0:
        domain = ordered[index]
        if best and sl_wl[domain] >= remaining:
            domain = best_fit(ordered, index, remaining, sl_wl, leader, leaders_left)
        result.append(domain)
        leaders_left -= leader[domain]
        remaining -= sl_wl[domain]
        index += 1
    if leaders_left > 0:
        return not_fit_reason(topo, counts, plan, level, plan.leader - leaders_left, exclusions)
    rest = worker_order(counts, ordered[index:], least_free)
    index = 0
    while remaining > 0 and index < len(rest):
        domain = rest[index]
        if best and sl[domain] >= remaining:
            domain = best_fit(rest, index, remaining, sl, leader, 0)
        result.append(domain)
        remaining -= sl[domain]
        index += 1
    if remaining > 0:
        return not_fit_reason(topo, counts, plan, level, need - remaining, exclusions)
    return level, result


def descend(
    topo: Topology, counts: Counts, plan: Plan, level: int, fit: list[int], pooled: bool
) -> list[int] | str:
    """Phase 2b: distribute at the fit level, then go down to the leaves. Down to the slice
    level the children of all chosen domains are pooled and re-chosen (`pooled`, skipped by
    BalancedPlacement); below it each parent hands its own pods to its own children, in
    inner-slice units under multi-layer slices. Returns the chosen leaves."""
    least_free, leaders = plan.least_free, plan.leader
    placed = distribute(counts, fit, plan.count, leaders, plan.slice_size, least_free, True)
    if placed is None:
        return reasons.incomplete(topo.levels[level])
    lowest = topo.depth - 1
    children = topo.children
    if pooled:
        while level < min(lowest, plan.slice_level):
            level += 1
            pool = worker_order(counts, (c for d in placed for c in children[d]), least_free)
            placed = distribute(
                counts, pool, plan.count, leaders, plan.slice_size, least_free, True
            )
            if placed is None:
                return reasons.incomplete(topo.levels[level])
    pod, pod_wl, sl, sl_wl, leader = counts.arrays()
    while level < lowest:
        unit = plan.slice_size if level < plan.slice_level else plan.inner.get(level + 1, 1)
        level += 1
        below: list[int] = []
        for parent in placed:
            kids = worker_order(counts, children[parent], least_free)
            if unit > 1:
                # The slice counts from phase 1 belong to the outermost layer.
                for kid in kids:
                    sl[kid] = pod[kid] // unit
                    sl_wl[kid] = pod_wl[kid] // unit
            part = distribute(counts, kids, pod[parent], leader[parent], unit, least_free, unit > 1)
            if part is None:
                return reasons.incomplete(topo.levels[level])
            below.extend(part)
        placed = below
    return placed
