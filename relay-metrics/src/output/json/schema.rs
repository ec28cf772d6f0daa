//! Relay's categories.

use super::Writer;
use crate::snapshot::*;

pub(super) fn process_sampling_metadata(w: &mut Writer<'_>, metadata: &ProcessSamplingMetadata) {
    let ProcessSamplingMetadata {
        visible_processes,
        sampled_processes,
        field_sampled_processes,
    } = metadata;
    w.first("visible_processes").u64(*visible_processes);
    w.key("sampled_processes").u64(*sampled_processes);
    w.key("field_sampled_processes").out.push(b'{');
    for (index, (key, count)) in field_sampled_processes.iter().enumerate() {
        if index > 0 {
            w.out.push(b',');
        }
        w.name(key);
        w.out.push(b':');
        w.u64(count);
    }
    w.close();
    w.close();
}

fn limit_event(w: &mut Writer<'_>, event: &ResourceLimitEventCount) {
    let ResourceLimitEventCount {
        resource,
        event,
        count,
    } = event;
    w.first("resource").name(resource.as_str());
    w.key("event").name(event.as_str());
    w.key("count").measurement(count);
    w.close();
}

pub(super) fn cpu_metrics(w: &mut Writer<'_>, cpu: &CpuMetrics) {
    let CpuMetrics {
        user_time,
        system_time,
        total_time,
        consumption_rate,
        throttled_time,
        effective_limit,
        some_pressure_stall_time,
        full_pressure_stall_time,
        limit_events,
    } = cpu;
    w.first("user_time").measurement(user_time);
    w.key("system_time").measurement(system_time);
    w.key("total_time").measurement(total_time);
    w.key("consumption_rate").measurement(consumption_rate);
    w.key("throttled_time").measurement(throttled_time);
    w.key("effective_limit").measurement(effective_limit);
    w.key("some_pressure_stall_time")
        .measurement(some_pressure_stall_time);
    w.key("full_pressure_stall_time")
        .measurement(full_pressure_stall_time);
    w.key("limit_events").list(limit_events, limit_event);
    w.close();
}

pub(super) fn memory_metrics(w: &mut Writer<'_>, memory: &MemoryMetrics) {
    let MemoryMetrics {
        system_used,
        system_total,
        system_available,
        resident,
        private,
        physical_footprint,
        virtual_memory,
        peak_resident,
        limit,
        environment_accounted,
        some_pressure_stall_time,
        full_pressure_stall_time,
        out_of_memory_event_count,
        limit_events,
    } = memory;
    w.first("system_used").measurement(system_used);
    w.key("system_total").measurement(system_total);
    w.key("system_available").measurement(system_available);
    w.key("resident").measurement(resident);
    w.key("private").measurement(private);
    w.key("physical_footprint").measurement(physical_footprint);
    w.key("virtual_memory").measurement(virtual_memory);
    w.key("peak_resident").measurement(peak_resident);
    w.key("limit").measurement(limit);
    w.key("environment_accounted")
        .measurement(environment_accounted);
    w.key("some_pressure_stall_time")
        .measurement(some_pressure_stall_time);
    w.key("full_pressure_stall_time")
        .measurement(full_pressure_stall_time);
    w.key("out_of_memory_event_count")
        .measurement(out_of_memory_event_count);
    w.key("limit_events").list(limit_events, limit_event);
    w.close();
}

pub(super) fn process_metrics(w: &mut Writer<'_>, process: &ProcessMetrics) {
    let ProcessMetrics {
        active_count,
        descendant_count,
        thread_count,
        lifetime_creation_count,
        open_file_descriptor_count,
        windows_handle_count,
        limit_events,
    } = process;
    w.first("active_count").measurement(active_count);
    w.key("descendant_count").measurement(descendant_count);
    w.key("thread_count").measurement(thread_count);
    w.key("lifetime_creation_count")
        .measurement(lifetime_creation_count);
    w.key("open_file_descriptor_count")
        .measurement(open_file_descriptor_count);
    w.key("windows_handle_count")
        .measurement(windows_handle_count);
    w.key("limit_events").list(limit_events, limit_event);
    w.close();
}

pub(super) fn disk_metrics(w: &mut Writer<'_>, disk: &DiskMetrics) {
    let DiskMetrics {
        read_data,
        write_data,
        read_throughput,
        write_throughput,
        read_operations,
        write_operations,
        filesystems,
    } = disk;
    w.first("read_data").measurement(read_data);
    w.key("write_data").measurement(write_data);
    w.key("read_throughput").measurement(read_throughput);
    w.key("write_throughput").measurement(write_throughput);
    w.key("read_operations").measurement(read_operations);
    w.key("write_operations").measurement(write_operations);
    w.key("filesystems").list(filesystems, filesystem);
    w.close();
}

fn filesystem(w: &mut Writer<'_>, filesystem: &FilesystemCapacityMetrics) {
    let FilesystemCapacityMetrics {
        path,
        total_capacity,
        available_capacity,
        free_capacity,
    } = filesystem;
    w.first("path").string(path);
    w.key("total_capacity").measurement(total_capacity);
    w.key("available_capacity").measurement(available_capacity);
    w.key("free_capacity").measurement(free_capacity);
    w.close();
}

pub(super) fn gpu_metrics(w: &mut Writer<'_>, gpu: &GpuMetrics) {
    let GpuMetrics {
        device_metrics,
        process_metrics,
    } = gpu;
    w.first("device_metrics")
        .option(device_metrics, |w, devices| w.list(devices, gpu_device));
    w.key("process_metrics")
        .option(process_metrics, |w, processes| {
            w.list(processes, gpu_process)
        });
    w.close();
}

fn gpu_device(w: &mut Writer<'_>, device: &AcceleratorDeviceMetrics) {
    let AcceleratorDeviceMetrics {
        vendor,
        device_identifier,
        device_index,
        memory_used,
        compute_utilization,
    } = device;
    w.first("vendor").name(vendor.as_str());
    w.key("device_identifier").string(device_identifier);
    w.key("device_index").opt_u32(*device_index);
    w.key("memory_used").measurement(memory_used);
    w.key("compute_utilization")
        .measurement(compute_utilization);
    w.close();
}

fn gpu_process(w: &mut Writer<'_>, process: &AcceleratorProcessMetrics) {
    let AcceleratorProcessMetrics {
        vendor,
        device_identifier,
        device_index,
        process_id,
        memory_used,
        compute_utilization,
    } = process;
    w.first("vendor").name(vendor.as_str());
    w.key("device_identifier").string(device_identifier);
    w.key("device_index").opt_u32(*device_index);
    w.key("process_id").u32(*process_id);
    w.key("memory_used").measurement(memory_used);
    w.key("compute_utilization")
        .measurement(compute_utilization);
    w.close();
}

pub(super) fn network_metrics(w: &mut Writer<'_>, network: &NetworkMetrics) {
    let NetworkMetrics {
        measurement_scope,
        system,
        interfaces,
    } = network;
    w.first("measurement_scope")
        .name(measurement_scope.as_str());
    w.key("system");
    traffic(w, system);
    w.key("interfaces").list(interfaces, |w, interface| {
        let NetworkInterfaceMetrics { name, traffic: t } = interface;
        w.first("name").string(name);
        w.key("traffic");
        traffic(w, t);
        w.close();
    });
    w.close();
}

fn traffic(w: &mut Writer<'_>, traffic: &NetworkTrafficMetrics) {
    let NetworkTrafficMetrics {
        received_data,
        transmitted_data,
        receive_throughput,
        transmit_throughput,
        received_packets,
        transmitted_packets,
        receive_errors,
        transmit_errors,
    } = traffic;
    w.first("received_data").measurement(received_data);
    w.key("transmitted_data").measurement(transmitted_data);
    w.key("receive_throughput").measurement(receive_throughput);
    w.key("transmit_throughput")
        .measurement(transmit_throughput);
    w.key("received_packets").measurement(received_packets);
    w.key("transmitted_packets")
        .measurement(transmitted_packets);
    w.key("receive_errors").measurement(receive_errors);
    w.key("transmit_errors").measurement(transmit_errors);
    w.close();
}
