"""The store on its own: resourceVersions, history bounds, consistent pages, selectors."""

from __future__ import annotations

import pytest

from daemon.sim.errors import ApiError
from daemon.sim.registry import DeleteOptions, Registry
from daemon.sim.resources import NAMESPACES, PODS
from daemon.sim.selectors import field_selector, label_selector
from daemon.sim.store import Expired, Store, decode


def pod(name: str, **labels: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


def store_with_default(history: int = 100) -> tuple[Store, Registry]:
    store = Store(seed=1, history=history)
    registry = Registry(store)
    registry.create(NAMESPACES, "", {"metadata": {"name": "default"}})
    return store, registry


def test_resource_versions_are_global_and_increasing() -> None:
    store, registry = store_with_default()
    a = registry.create(PODS, "default", pod("a"))
    ns = registry.create(NAMESPACES, "", {"metadata": {"name": "x"}})
    b = registry.create(PODS, "default", pod("b"))
    assert a.rv < ns.rv < b.rv == store.rv
    assert a.obj["metadata"]["resourceVersion"] == str(a.rv)


def test_seeded_identities_are_reproducible() -> None:
    uids = []
    for _ in range(2):
        _store, registry = store_with_default()
        created = registry.create(
            PODS, "default", {"metadata": {"generateName": "w-"}, "spec": pod("x")["spec"]}
        )
        uids.append((created.obj["metadata"]["uid"], created.obj["metadata"]["name"]))
    assert uids[0] == uids[1]


def test_history_is_bounded_per_kind() -> None:
    store, registry = store_with_default(history=2)
    first = registry.create(PODS, "default", pod("a"))
    registry.create(PODS, "default", pod("b"))
    registry.create(PODS, "default", pod("c"))
    with pytest.raises(Expired) as err:
        store.table(PODS).events_after(first.rv - 1)
    assert str(err.value) == f"too old resource version: {first.rv - 1} ({first.rv})"
    assert [e.key for e in store.table(PODS).events_after(first.rv)] == ["default/b", "default/c"]
    # Namespaces keep their own history.
    assert store.table(NAMESPACES).events_after(0)


def test_pages_reconstruct_the_snapshot() -> None:
    store, registry = store_with_default()
    for name in "abcde":
        registry.create(PODS, "default", pod(name))
    snapshot = store.rv
    items, last = store.page(PODS, None, None, limit=2, at_rv=snapshot)
    assert [decode(i)["metadata"]["name"] for i in items] == ["a", "b"]
    assert last == "default/b"
    registry.create(PODS, "default", pod("bb"))
    registry.delete(PODS, "default", "c", DeleteOptions())
    registry.update(
        PODS,
        "default",
        "d",
        {
            **store.get(PODS, "default", "d").copy(),
            "metadata": {
                **store.get(PODS, "default", "d").copy()["metadata"],
                "labels": {"new": "1"},
            },
        },
    )  # type: ignore[union-attr]
    items, last = store.page(PODS, None, None, after=last, limit=2, at_rv=snapshot)
    names = [decode(i)["metadata"] for i in items]
    assert [m["name"] for m in names] == ["c", "d"]
    assert names[1].get("labels") == {}
    items, last = store.page(PODS, "default", None, after=last, limit=2, at_rv=snapshot)
    assert [decode(i)["metadata"]["name"] for i in items] == ["e"]
    assert last is None


def test_label_selector_grammar() -> None:
    objs = [pod("a", env="prod", tier="web"), pod("b", env="dev"), pod("c")]

    def names(selector: str) -> list[str]:
        predicate = label_selector(selector)
        assert predicate is not None
        return [str(o["metadata"]["name"]) for o in objs if predicate(o)]  # type: ignore[index]

    assert names("env in (prod, dev),!tier") == ["b"]
    assert names("env notin (prod)") == ["b", "c"]
    assert label_selector("") is None
    for bad in ("env in (a", "=x", "a b", "key=bad value"):
        with pytest.raises(ApiError):
            label_selector(bad)


def test_field_selector_support() -> None:
    predicate = field_selector("spec.unschedulable=true", "Node")
    assert predicate is not None
    assert predicate({"spec": {"unschedulable": True}})
    with pytest.raises(ApiError, match=r"field label not supported: spec\.nodeName"):
        field_selector("spec.nodeName=x", "Job")


def _running(phase: str = "Running") -> dict[str, object]:
    return {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}


def test_an_internal_status_write_changes_only_the_status() -> None:
    store, registry = store_with_default()
    old = registry.create(PODS, "default", pod("a", app="x"))
    before = old.copy()
    watcher = store.watch(PODS, None, None, old.rv)
    new = registry.write_status(PODS, old, _running())
    assert new.rv == store.rv > old.rv
    assert decode(new.data) == new.obj
    assert new.obj == {**before, "metadata": new.obj["metadata"], "status": _running()}
    assert new.obj["metadata"] == {**before["metadata"], "resourceVersion": str(new.rv)}
    # The version before lives on in the watch history and in consistent lists: untouched.
    assert old.obj == before
    assert decode(old.data) == before
    line = decode(watcher.pending.popleft())
    assert line == {"type": "MODIFIED", "object": new.obj}
    assert not watcher.pending
    # Writing the same status again is a no-op, as an unchanged update is.
    assert registry.write_status(PODS, new, _running()) is new
    assert store.rv == new.rv


def test_an_internal_status_write_is_still_checked() -> None:
    store, registry = store_with_default()
    old = registry.create(PODS, "default", pod("a"))
    with pytest.raises(ApiError) as malformed:
        registry.write_status(PODS, old, {"phase": "Running", "conditions": [{"type": 1}]})
    assert malformed.value.code == 400
    assert "Pod.status.conditions[0].type" in str(malformed.value)
    done = registry.write_status(PODS, old, _running("Succeeded"))
    with pytest.raises(ApiError) as terminal:
        registry.write_status(PODS, done, _running())
    assert terminal.value.code == 422
    with pytest.raises(ApiError) as stale:
        registry.write_status(PODS, old, _running())  # not the current version any more
    assert stale.value.code == 409
    assert store.get(PODS, "default", "a") is done


def test_a_status_update_through_the_api_leaves_the_stored_version_alone() -> None:
    _store, registry = store_with_default()
    old = registry.create(PODS, "default", pod("a", app="x"))
    before = old.copy()
    body = old.copy()
    body["status"] = _running()
    body["metadata"]["labels"] = {"app": "changed"}  # not writable through status
    new = registry.update(PODS, "default", "a", body, subresource="status")
    assert old.obj == before
    assert new.obj["status"] == _running()
    assert new.obj["metadata"]["labels"] == {"app": "x"}
    assert decode(new.data) == new.obj


def test_bind_and_delete_leave_the_stored_version_alone() -> None:
    store, registry = store_with_default()
    created = registry.create(PODS, "default", pod("a", app="x"))
    before = created.copy()
    binding = {"target": {"name": "n1"}, "metadata": {"annotations": {"k": "v"}}}
    bound = registry.bind("default", "a", binding)
    assert created.obj == before
    assert bound.obj["spec"] == {**before["spec"], "nodeName": "n1"}
    assert bound.obj["metadata"]["annotations"] == {"k": "v"}
    assert decode(bound.data) == bound.obj
    bound_before = bound.copy()
    terminating = registry.delete(PODS, "default", "a", DeleteOptions()).obj
    assert bound.obj == bound_before
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    namespace = registry.create(NAMESPACES, "", {"metadata": {"name": "gone"}})
    namespace_before = namespace.copy()
    registry.delete(NAMESPACES, "", "gone", DeleteOptions())
    assert namespace.obj == namespace_before
    stored = store.get(NAMESPACES, "", "gone")
    assert stored is not None
    assert stored.obj["status"] == {"phase": "Terminating"}
