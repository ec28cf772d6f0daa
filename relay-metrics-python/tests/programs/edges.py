# A Relay program exercising the lifecycle's edges; prints what each step raised.
import asyncio
import json
import os

from nemo_relay import plugin, resource_metrics


def outcome(error: BaseException | None) -> object:
    return None if error is None else [type(error).__name__, str(error)]


async def attempt(step) -> object:
    try:
        await step()
    except BaseException as error:  # noqa: BLE001 - the point is to record it
        return outcome(error)
    return None


def spec(config: dict, enabled: bool = True) -> plugin.PluginConfig:
    return plugin.PluginConfig(
        components=[plugin.ComponentSpec(kind="resource_metrics", enabled=enabled, config=config)]
    )


async def main() -> dict[str, object]:
    out: dict[str, object] = {}
    out["collect_without_activation"] = await attempt(resource_metrics.collect)
    out["invalid_interval"] = await attempt(lambda: plugin.initialize(spec({"polling": {"interval_millis": 0}})))
    out["unknown_kind"] = await attempt(
        lambda: plugin.initialize(plugin.PluginConfig(components=[plugin.ComponentSpec(kind="no_such_kind")]))
    )
    activation = await plugin.initialize(spec({}))
    out["is_active"] = activation.is_active
    out["second_initialize"] = await attempt(lambda: plugin.initialize(spec({})))
    out["collect_active"] = await attempt(resource_metrics.collect)
    await activation.close()
    out["closed_is_active"] = activation.is_active
    out["close_twice"] = await attempt(activation.close)
    out["collect_after_close"] = await attempt(resource_metrics.collect)
    disabled = await plugin.initialize(spec({}, enabled=False))
    out["disabled_is_active"] = disabled.is_active
    out["collect_disabled"] = await attempt(resource_metrics.collect)
    await disabled.close()
    async with plugin.activate(spec({"measurement_scope": "application_process"})) as context:
        out["context_active"] = context.is_active
        snapshot = await resource_metrics.collect()
        out["context_scope"] = snapshot.measurement_scope
    out["context_closed"] = context.is_active
    return out


results = asyncio.run(main())
try:
    resource_metrics.collect().send(None)
except BaseException as error:  # noqa: BLE001
    results["no_event_loop"] = outcome(error)
print(json.dumps(results))
os._exit(0)
