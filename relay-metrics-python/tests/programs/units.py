# A Relay program: unit overrides, enum comparisons, dataclasses.asdict and replace.
import asyncio
import dataclasses
import json
import os

from nemo_relay import plugin
from nemo_relay.resource_metrics import (
    CapacityUnit,
    CpuUnit,
    DataUnit,
    DurationUnit,
    ResourceMetricsSnapshot,
    collect,
)


async def main() -> None:
    units = {
        "cpu": {"user_time": "seconds", "total_time": "microseconds", "consumption_rate": "millicores"},
        "memory": {"resident": "mebibytes", "system_total": "bytes", "virtual_memory": "kilobytes"},
        "disk": {"read_data": "kibibytes", "filesystem_total_capacity": "gibibytes"},
        "network": {"system": {"received_data": "kilobytes"}},
    }
    config = plugin.PluginConfig(
        components=[
            plugin.ComponentSpec(
                kind="resource_metrics",
                config={"units": units, "disk": {"filesystem_paths": ["/"]}},
            )
        ]
    )
    async with plugin.activate(config):
        await collect()
        await asyncio.sleep(0.25)
        snapshot: ResourceMetricsSnapshot = await collect()
    assert snapshot.cpu is not None and snapshot.memory is not None
    assert snapshot.disk is not None and snapshot.network is not None
    user_time = snapshot.cpu.user_time
    resident = snapshot.memory.resident
    facts = {
        "user_time_is_seconds": user_time is not None and user_time.unit is DurationUnit.SECONDS,
        "user_time_eq_str": user_time is not None and user_time.unit == "seconds",
        "user_time_type": type(user_time.value).__name__ if user_time else None,
        "total_time_unit": snapshot.cpu.total_time.unit.value if snapshot.cpu.total_time else None,
        "total_time_type": type(snapshot.cpu.total_time.value).__name__ if snapshot.cpu.total_time else None,
        "rate_is_millicores": snapshot.cpu.consumption_rate is not None
        and snapshot.cpu.consumption_rate.unit is CpuUnit.MILLICORES,
        "resident_is_mib": resident is not None and resident.unit is CapacityUnit.MEBIBYTES,
        "resident_type": type(resident.value).__name__ if resident else None,
        "system_total_type": type(snapshot.memory.system_total.value).__name__
        if snapshot.memory.system_total
        else None,
        "system_total_bytes_mod_1024": snapshot.memory.system_total.value % 1024
        if snapshot.memory.system_total
        else None,
        "virtual_type": type(snapshot.memory.virtual_memory.value).__name__
        if snapshot.memory.virtual_memory
        else None,
        "read_data_is_data_kib": snapshot.disk.read_data is not None
        and snapshot.disk.read_data.unit is DataUnit.KIBIBYTES,
        "fs_total_unit": snapshot.disk.filesystems[0].total_capacity.unit.value
        if snapshot.disk.filesystems[0].total_capacity
        else None,
        "fs_total_gib": round(snapshot.disk.filesystems[0].total_capacity.value, 3)
        if snapshot.disk.filesystems[0].total_capacity
        else None,
        "net_received_unit_class": type(snapshot.network.system.received_data.unit).__name__
        if snapshot.network.system.received_data
        else None,
    }
    as_dict = dataclasses.asdict(snapshot)
    facts["asdict_keys"] = [key for key in as_dict if key != "extensions"]
    facts["asdict_user_time"] = sorted(as_dict["cpu"]["user_time"])
    facts["asdict_unit_is_enum"] = isinstance(as_dict["cpu"]["user_time"]["unit"], DurationUnit)
    replaced = dataclasses.replace(snapshot, cpu=None)
    facts["replace_cpu"] = replaced.cpu is None
    facts["replace_memory_same"] = replaced.memory == snapshot.memory
    try:
        snapshot.cpu = None  # type: ignore[misc]
        facts["frozen"] = False
    except dataclasses.FrozenInstanceError:
        facts["frozen"] = True
    print(json.dumps(facts))


asyncio.run(main())
os._exit(0)
