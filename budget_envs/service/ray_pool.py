"""Envs held by Ray actors, stepped in batches: :class:`EnvActorPool`.

A pool of ``n_actors`` Ray core actors, each holding ``envs_per_actor`` envs built with
``gymnasium.make(env_id, **make_kwargs)``. Env ``i`` lives on actor ``i // envs_per_actor``
for the pool's whole life (an env is state, so a call must reach the actor that holds it;
``ray.util.ActorPool`` hands work to any idle actor, which suits stateless work only). A
batch call sends one message per actor concerned and waits for all of them, so the envs of
different actors step in parallel, and returns results in the order asked.

Example (on a Ray of this machine)::

    from budget_envs.service.ray_pool import EnvActorPool

    with EnvActorPool("BudgetMix/ToolUse-v0", n_actors=2, envs_per_actor=4, budget=20) as pool:
        first = pool.reset_batch(seeds=range(pool.num_envs))  # [(obs, info), ...]
        actions = [info["candidate_actions"][0] for _, info in first]  # sendable as they are
        results = pool.step_batch(actions)  # [(obs, reward, terminated, truncated, info), ...]

Results are what the envs returned, pickled (tuples stay tuples). Bad input to an env is a turn
with feedback, as in process; a failing env raises its own exception here.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["EnvActorPool", "EnvHost", "SnapshotRef", "connect_ray"]

#: Snapshots an actor keeps per env for :meth:`EnvActorPool.call` ``("restore", ref)``.
SNAPSHOTS_KEPT = 64


def connect_ray(address: str | None = None) -> Any:
    """Import Ray and make sure it is initialized; returns the ``ray`` module.

    An initialized Ray is kept as is. Otherwise ``"local"`` (the default) starts a Ray on this
    machine (its workers at the driver's priority, not Ray's default niceness 15) and ``"auto"``
    or an address joins a running cluster.
    """
    from budget_envs._util import import_optional
    from budget_envs.errors import RayUnavailable

    ray = import_optional("ray", extra="ray", what="Ray actors for envs")
    if not ray.is_initialized():
        address = address or "local"
        try:
            if address == "local":
                # Ray's workers default to niceness 15: on a busy machine the env actors would
                # wait for every other process (RAY_worker_niceness set by the user wins)
                os.environ.setdefault("RAY_worker_niceness", "0")
                ray.init(address="local", include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:
            first = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise RayUnavailable(
                f"no Ray cluster at {address!r} ({first}); start one with `ray start --head`, "
                "or use address='local' for a Ray on this machine"
            ) from exc
    return ray


@dataclass(frozen=True)
class SnapshotRef:
    """A snapshot kept by the actor holding env ``index`` (``unwrapped.snapshot()`` there)."""

    index: int
    number: int


def _config_key(env_id: str, make_kwargs: Mapping[str, Any]) -> str:
    return json.dumps([env_id, dict(make_kwargs)], sort_keys=True, default=repr)


def make_quietly(env_id: str, make_kwargs: Mapping[str, Any]) -> Any:
    """``gymnasium.make(env_id, **make_kwargs)`` without the passive checker's Text-space notes."""
    import gymnasium as gym

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **dict(make_kwargs))


class EnvHost:
    """The body of one env actor: envs by pool index, each with its built configurations.

    An index holds one active env; :meth:`configure` switches it to another configuration
    (built once and kept, so switching back costs nothing).
    """

    def __init__(self, entries: Sequence[Any] = ()) -> None:
        import budget_envs  # noqa: F401  (registers the product ids in this process)

        self._register(entries)
        self._built: dict[tuple[int, str], Any] = {}
        self._active: dict[int, Any] = {}
        self._snaps: dict[int, OrderedDict[int, Any]] = {}
        self._count = 0

    @staticmethod
    def _register(entries: Sequence[Any]) -> None:
        from budget_envs.registry import register_env

        for entry in entries:
            register_env(entry)

    def configure(
        self,
        indices: Sequence[int],
        key: str,
        factory: Callable[[], Any],
        entries: Sequence[Any] = (),
    ) -> list[dict[str, Any]]:
        """Make ``indices`` use the env ``factory()`` builds (once per index and ``key``)."""
        from budget_envs.core import TextAgentEnv

        self._register(entries)
        out = []
        for i in indices:
            env = self._built.get((i, key))
            if env is None:
                env = self._built[(i, key)] = factory()
            self._active[i] = env
            cls = type(env.unwrapped)
            filled = any(
                getattr(cls, name, None) not in (None, getattr(TextAgentEnv, name))
                for name in ("_oracle_actions", "oracle_actions")
            )
            out.append({"has_oracle": filled})
        return out

    def _env(self, index: int) -> Any:
        env = self._active.get(index)
        if env is None:
            raise KeyError(f"this actor holds no env with index {index!r}")
        return env

    def reset(self, items: Sequence[tuple[int, int | None, dict | None]]) -> list[tuple]:
        return [self._env(i).reset(seed=seed, options=options) for i, seed, options in items]

    def step(self, items: Sequence[tuple[int, Any]]) -> list[tuple]:
        return [self._env(i).step(action) for i, action in items]

    def call(self, index: int, name: str, args: tuple, kwargs: dict) -> Any:
        """``env.unwrapped.<name>(*args, **kwargs)``; ``args=None`` reads an attribute."""
        target = self._env(index).unwrapped
        if name == "restore" and args and isinstance(args[0], SnapshotRef):
            ref = args[0]
            snap = self._snaps.get(index, {}).get(ref.number)
            if snap is None:
                raise KeyError(f"snapshot {ref!r} is not kept any more (or was never taken here)")
            return target.restore(snap)
        attr = getattr(target, name)
        if args is None:
            return ("method", None) if callable(attr) else ("value", attr)
        result = attr(*args, **kwargs)
        if name == "snapshot":
            self._count += 1
            kept = self._snaps.setdefault(index, OrderedDict())
            kept[self._count] = result
            while len(kept) > SNAPSHOTS_KEPT:
                kept.popitem(last=False)
            return SnapshotRef(index, self._count)
        return result

    def close(self) -> None:
        for env in self._built.values():
            env.close()
        self._built.clear()
        self._active.clear()
        self._snaps.clear()


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


class EnvActorPool:
    """``n_actors`` Ray actors holding ``n_actors * envs_per_actor`` envs of one id.

    Args:
        env_id: a registered id (ids registered at run time are shipped to the actors).
        n_actors: actors (processes); each takes ``num_cpus`` of the cluster.
        envs_per_actor: envs each actor holds (stepped one after another inside it).
        address: Ray to start or join when Ray is not initialized (see :func:`connect_ray`).
        num_cpus: CPUs each actor reserves (Ray's actor option).
        **make_kwargs: ``gymnasium.make`` keyword arguments (``budget``, ``visibility``,
            ``faults``, env kwargs).

    Raises:
        ValueError: a count that is not a positive int.
        gymnasium.error.NameNotFound: an unknown id.
    """

    def __init__(
        self,
        env_id: str | None,
        n_actors: int,
        *,
        envs_per_actor: int = 1,
        address: str | None = None,
        num_cpus: float = 1,
        **make_kwargs: Any,
    ) -> None:
        from budget_envs.registry import entry_for

        self._n_actors = _check_count("n_actors", n_actors)
        self._per = _check_count("envs_per_actor", envs_per_actor)
        if isinstance(num_cpus, bool) or not isinstance(num_cpus, (int, float)) or num_cpus < 0:
            raise ValueError(f"num_cpus must be a number >= 0, got {num_cpus!r}")
        # NameNotFound with the registered ids, before any actor starts
        entries = [] if env_id is None else [entry_for(env_id)]
        self._ray = ray = connect_ray(address)
        actor_cls = ray.remote(num_cpus=num_cpus)(EnvHost)
        self._actors = [actor_cls.remote(entries) for _ in range(self._n_actors)]
        # ids each actor was sent (a runtime-registered id must reach an actor before its envs)
        self._shipped = [{e.id for e in entries} for _ in range(self._n_actors)]
        self._lock = threading.Lock()
        self.env_id = entries[0].id if entries else None
        self.make_kwargs = dict(make_kwargs)
        self._oracle: list[bool | None] = [None] * self.num_envs
        if self.env_id is not None:
            self.configure(self.env_id, **self.make_kwargs)

    # ------------------------------------------------------------------ layout
    @property
    def num_envs(self) -> int:
        return self._n_actors * self._per

    @property
    def n_actors(self) -> int:
        return self._n_actors

    def actor_of(self, index: int) -> int:
        """The actor holding env ``index``."""
        return self._check_index(index) // self._per

    def _check_index(self, index: Any) -> int:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.num_envs:
            raise IndexError(f"env index must be an int in [0, {self.num_envs}), got {index!r}")
        return index

    def _indices(self, indices: Iterable[int] | None, n: int | None = None) -> list[int]:
        out = list(range(self.num_envs)) if indices is None else list(indices)
        for i in out:
            self._check_index(i)
        if len(set(out)) != len(out):
            raise ValueError(f"indices must not repeat, got {out!r}")
        if n is not None and n != len(out):
            raise ValueError(f"got {n} values for {len(out)} envs (indices {out!r})")
        return out

    def _scatter(self, method: str, items: list[tuple], *extra: Any) -> list[Any]:
        """One call per actor with its share of ``items`` (``items[k][0]`` = env index)."""
        by_actor: dict[int, list[int]] = {}
        for k, item in enumerate(items):
            by_actor.setdefault(item[0] // self._per, []).append(k)
        refs = {
            a: getattr(self._actors[a], method).remote([items[k] for k in ks], *extra)
            for a, ks in by_actor.items()
        }
        out: list[Any] = [None] * len(items)
        for a, ks in by_actor.items():
            for k, value in zip(ks, self._get(refs[a]), strict=True):
                out[k] = value
        return out

    def _get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None  # the env's own exception, as in process
            raise

    # ------------------------------------------------------------------ batches
    def configure(
        self, env_id: str | None = None, indices: Iterable[int] | None = None, **make_kwargs: Any
    ) -> None:
        """Rebuild envs ``indices`` (all by default) as ``gymnasium.make(env_id, **make_kwargs)``.

        Each actor keeps the envs of every configuration it built, so switching between a few
        configurations (say, fault settings) builds each once per env.
        """
        from budget_envs.registry import entry_for

        if env_id is None and self.env_id is None:
            raise ValueError("this pool has no env id yet: pass env_id")
        entry = entry_for(env_id or self.env_id)
        self.configure_with(
            _config_key(entry.id, make_kwargs),
            functools.partial(make_quietly, entry.id, dict(make_kwargs)),
            indices,
            env_ids=[entry.id],
        )

    def configure_with(
        self,
        key: str,
        factory: Callable[[], Any],
        indices: Iterable[int] | None = None,
        env_ids: Iterable[str] = (),
    ) -> None:
        """Make envs ``indices`` the env ``factory()`` builds in their actor (picklable; built
        once per env and ``key``). ``env_ids``: ids the actors must know (runtime-registered
        ones are shipped)."""
        from budget_envs.registry import entry_for

        by_actor: dict[int, list[int]] = {}
        for i in self._indices(indices):
            by_actor.setdefault(i // self._per, []).append(i)
        ids = list(env_ids)
        refs = {}
        for a, ii in by_actor.items():
            with self._lock:
                new = [entry_for(e) for e in ids if e not in self._shipped[a]]
                self._shipped[a].update(e.id for e in new)
            refs[a] = self._actors[a].configure.remote(ii, key, factory, new)
        for a, ii in by_actor.items():
            for i, desc in zip(ii, self._get(refs[a]), strict=True):
                self._oracle[i] = desc["has_oracle"]

    def env(self, index: int) -> ActorEnv:
        """A ``gymnasium.Env`` view of env ``index``: ``reset`` / ``step`` / ``unwrapped`` run in
        its actor (one message each)."""
        self._check_index(index)
        if self._oracle[index] is None:
            raise ValueError(f"env {index} is not configured yet: call configure() first")
        return ActorEnv(self, index)

    def has_oracle(self, index: int) -> bool:
        """Whether env ``index`` (as configured now) implements ``oracle_actions``."""
        return bool(self._oracle[self._check_index(index)])

    def reset_batch(
        self,
        seeds: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        indices: Iterable[int] | None = None,
    ) -> list[tuple[Any, dict[str, Any]]]:
        """Reset envs ``indices`` (all by default); returns their ``(obs, info)`` in that order.

        ``seeds``: one per env, or an int ``s`` (env ``k`` of the batch gets ``s + k``, as in
        Gymnasium's vector envs), or None. ``options``: one mapping for all, or one per env.
        """
        idx = self._indices(indices)
        if seeds is None or isinstance(seeds, int) and not isinstance(seeds, bool):
            seed_list = [None if seeds is None else seeds + k for k in range(len(idx))]
        elif isinstance(seeds, (str, bytes, bool)) or not isinstance(seeds, Iterable):
            raise TypeError(f"seeds must be an int, a sequence of ints or None, got {seeds!r}")
        else:
            seed_list = list(seeds)
            self._indices(idx, len(seed_list))
        if options is None or isinstance(options, Mapping):
            opt_list = [None if options is None else dict(options)] * len(idx)
        else:
            opt_list = [None if o is None else dict(o) for o in options]
            self._indices(idx, len(opt_list))
        return self._scatter(
            "reset", [(i, s, o) for i, s, o in zip(idx, seed_list, opt_list, strict=True)]
        )

    def step_batch(
        self, actions: Sequence[Any], indices: Iterable[int] | None = None
    ) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
        """Step envs ``indices`` (all by default) with ``actions`` (one each); returns their
        ``(obs, reward, terminated, truncated, info)`` in that order."""
        if isinstance(actions, (str, bytes)):
            raise TypeError(f"actions must be a sequence with one action per env, got {actions!r}")
        actions = list(actions)
        idx = self._indices(indices, len(actions))
        return self._scatter("step", list(zip(idx, actions, strict=True)))

    def call(self, name: str, *args: Any, indices: Iterable[int] | None = None, **kwargs: Any):
        """``env.unwrapped.<name>(*args, **kwargs)`` on envs ``indices``; a list of results.

        ``snapshot`` returns a :class:`SnapshotRef` (the snapshot stays in its actor) that
        ``call("restore", ref, indices=[i])`` takes back.
        """
        idx = self._indices(indices)
        refs = [self._actors[i // self._per].call.remote(i, name, args, kwargs) for i in idx]
        return [self._get(r) for r in refs]

    def _attr(self, index: int, name: str) -> tuple[str, Any]:
        return self._get(self._actors[index // self._per].call.remote(index, name, None, {}))

    def get_attr(self, name: str, indices: Iterable[int] | None = None) -> list[Any]:
        """``env.unwrapped.<name>`` of envs ``indices`` (an attribute, not a method)."""
        idx = self._indices(indices)
        refs = [self._actors[i // self._per].call.remote(i, name, None, {}) for i in idx]
        out = []
        for i, r in zip(idx, refs, strict=True):
            kind, value = self._get(r)
            if kind == "method":
                raise AttributeError(f"{name!r} of env {i} is a method: use call({name!r})")
            out.append(value)
        return out

    def close(self) -> None:
        """Close every env and end the actors."""
        actors, self._actors = self._actors, []
        if not actors:
            return
        for ref in [a.close.remote() for a in actors]:
            try:
                self._ray.get(ref)
            except Exception:  # an actor that died already has nothing left to close
                pass
        for a in actors:
            self._ray.kill(a)

    def __enter__(self) -> EnvActorPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RemoteUnwrapped:
    """``env.unwrapped`` of a pool env: attributes are read, methods called, in its actor."""

    def __init__(self, pool: EnvActorPool, index: int) -> None:
        self._pool = pool
        self._index = index
        self._methods: set[str] = set()

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._pool.call(name, *args, indices=[self._index], **kwargs)[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._methods:
            kind, value = self._pool._attr(self._index, name)
            if kind == "value":
                return value
            self._methods.add(name)
        return functools.partial(self._call, name)


class _RemoteOracle(RemoteUnwrapped):
    # Defined on the class, as on the family's env, so ``type(env.unwrapped).oracle_actions``
    # tells an env with an oracle from one without.
    def oracle_actions(self) -> list[str]:
        return self._call("oracle_actions")


class ActorEnv:
    """One env of an :class:`EnvActorPool` seen as a Gymnasium env (see :meth:`~EnvActorPool.env`).

    ``reset`` and ``step`` return what the env in the actor returned; ``unwrapped`` reaches the
    family env there (``oracle_actions()``, ``cost_to_go()``, ``snapshot()`` / ``restore()``).
    """

    def __init__(self, pool: EnvActorPool, index: int) -> None:
        from budget_envs.core import text_space

        self.pool = pool
        self.index = index
        cls = _RemoteOracle if pool.has_oracle(index) else RemoteUnwrapped
        self._unwrapped = cls(pool, index)
        self.observation_space = text_space(1 << 20)
        self.action_space = text_space(1 << 20)

    @property
    def unwrapped(self) -> RemoteUnwrapped:
        return self._unwrapped

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return self.pool.reset_batch([seed], [options], indices=[self.index])[0]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.pool.step_batch([action], indices=[self.index])[0]

    def close(self) -> None:
        """Nothing to free here: the env belongs to the pool (see :meth:`EnvActorPool.close`)."""
