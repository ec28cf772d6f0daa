# A typed Relay program: `mypy --strict` must accept it with relay_metrics as with nemo_relay.
import asyncio
import dataclasses
import os

from nemo_relay import plugin, resource_metrics
from nemo_relay.resource_metrics import CapacityUnit, DurationUnit, ResourceMeasurement, ResourceMetricsSnapshot


def resident_mib(snapshot: ResourceMetricsSnapshot) -> float | None:
    if snapshot.memory is None or snapshot.memory.resident is None:
        return None
    measurement: ResourceMeasurement[int | float, CapacityUnit] = snapshot.memory.resident
    if measurement.unit is CapacityUnit.KIBIBYTES:
        return measurement.value / 1024
    return float(measurement.value)


async def main() -> None:
    config = plugin.PluginConfig(
        components=[plugin.ComponentSpec(kind="resource_metrics", config={"measurement_scope": "process_tree"})]
    )
    report: plugin.PluginHostReport = plugin.validate(config)
    assert not [d for d in report["config"]["diagnostics"] if d["level"] == "error"]
    async with plugin.activate(config) as activation:
        assert activation.is_active
        snapshot = await resource_metrics.collect()
    cpu = snapshot.cpu
    user_ms: int | float | None = None
    if cpu is not None and cpu.user_time is not None and cpu.user_time.unit == DurationUnit.MILLISECONDS:
        user_ms = cpu.user_time.value
    trimmed = dataclasses.replace(snapshot, network=None)
    print(resident_mib(snapshot), user_ms, trimmed.timestamp.isoformat(), snapshot.measurement_scope)


if __name__ == "__main__":
    asyncio.run(main())
    os._exit(0)
