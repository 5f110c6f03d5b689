"""Decodes a TensorBoard events file independently of lightning-cpp's encoder (run with /usr/bin/python3).

  tensorboard_events.py <events file>

Checks the TFRecord framing (every length and data CRC: masked CRC32C, computed here bitwise) and
decodes each record as an Event with python3-protobuf, from tensorboard_event.proto compiled by
protoc into a temporary folder. Prints one line per decoded fact:

  file_version <version>
  scalar <step> <tag> <value, repr of the float32>
  hparams experiment hparam <name> <DATA_TYPE_...>
  hparams experiment metric <tag>
  hparams session_start_info <name> number <repr> | string <text> | bool true|false
  hparams session_end_info <STATUS_...>
  session_log <step> <START|...>
  wall_time <smallest> <largest>        (last line)

Exits 1 naming the record and byte offset on a bad CRC, a truncated record, an undecodable message,
a field number the .proto does not know, or a summary TensorBoard would not read as scalar or hparams.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HPARAMS_TAGS = {
    "_hparams_/experiment": "experiment",
    "_hparams_/session_start_info": "session_start_info",
    "_hparams_/session_end_info": "session_end_info",
}


class Bad(Exception):
    pass


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def compile_proto(out_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    protoc = shutil.which("protoc")
    if protoc is None:
        raise Bad("protoc not found (Debian: protobuf-compiler; scripts/install-deps.sh installs it)")
    subprocess.run([protoc, f"--proto_path={here}", f"--python_out={out_dir}", "tensorboard_event.proto"],
                   check=True)
    sys.path.insert(0, out_dir)
    import tensorboard_event_pb2
    return tensorboard_event_pb2


def records(data):
    """Yields (index, offset, payload) for each TFRecord, checking both CRCs."""
    offset, index = 0, 0
    while offset < len(data):
        where = f"record {index} at byte {offset}"
        if len(data) - offset < 12:
            raise Bad(f"{where}: truncated header ({len(data) - offset} bytes, need 12)")
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (stored,) = struct.unpack("<I", data[offset + 8:offset + 12])
        computed = masked_crc32c(header)
        if stored != computed:
            raise Bad(f"{where}: length CRC mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})")
        end = offset + 12 + length
        if end + 4 > len(data):
            raise Bad(f"{where}: truncated data (length {length}, {len(data) - offset - 12} bytes left)")
        payload = data[offset + 12:end]
        (stored,) = struct.unpack("<I", data[end:end + 4])
        computed = masked_crc32c(payload)
        if stored != computed:
            raise Bad(f"{where}: data CRC mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})")
        yield index, offset, payload
        offset, index = end + 4, index + 1


def check_known(message, where):
    """Every field decoded: one written under a number the .proto lacks is an error."""
    unknown = message.UnknownFields()
    if len(unknown):
        numbers = sorted({f.field_number for f in unknown})
        raise Bad(f"{where}: unknown field number(s) {numbers} in {message.DESCRIPTOR.name}")
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            for key in value:
                if field.message_type.fields_by_name["value"].type == field.TYPE_MESSAGE:
                    check_known(value[key], f"{where}.{field.name}[{key}]")
        elif field.label == field.LABEL_REPEATED:
            for i, item in enumerate(value):
                check_known(item, f"{where}.{field.name}[{i}]")
        else:
            check_known(value, f"{where}.{field.name}")


def hparams_lines(pb, value, where):
    plugin = value.metadata.plugin_data
    if plugin.plugin_name != "hparams":
        raise Bad(f"{where}: tag {value.tag!r} has plugin_name {plugin.plugin_name!r}, not 'hparams'")
    data = pb.HParamsPluginData()
    try:
        data.ParseFromString(plugin.content)
    except Exception as e:  # noqa: BLE001 - the message names the record
        raise Bad(f"{where}: hparams content does not decode: {e}")
    check_known(data, f"{where}: {value.tag} content")
    if data.version != 0:
        raise Bad(f"{where}: HParamsPluginData.version {data.version}, TensorBoard reads 0")
    kind = data.WhichOneof("data")
    if kind != HPARAMS_TAGS[value.tag]:
        raise Bad(f"{where}: tag {value.tag!r} holds {kind}")
    if kind == "experiment":
        for info in data.experiment.hparam_infos:
            yield f"hparams experiment hparam {info.name} {pb.DataType.Name(info.type)}"
        for info in data.experiment.metric_infos:
            yield f"hparams experiment metric {info.name.tag}"
    elif kind == "session_start_info":
        for name in sorted(data.session_start_info.hparams):
            v = data.session_start_info.hparams[name]
            which = v.WhichOneof("kind")
            if which == "number_value":
                yield f"hparams session_start_info {name} number {v.number_value!r}"
            elif which == "string_value":
                yield f"hparams session_start_info {name} string {v.string_value}"
            elif which == "bool_value":
                yield f"hparams session_start_info {name} bool {'true' if v.bool_value else 'false'}"
            else:
                raise Bad(f"{where}: hparam {name!r} has no value")
    else:
        yield f"hparams session_end_info {pb.Status.Name(data.session_end_info.status)}"


def decode(pb, data):
    lines, times = [], []
    for index, offset, payload in records(data):
        where = f"record {index} at byte {offset}"
        event = pb.Event()
        try:
            event.ParseFromString(payload)
        except Exception as e:  # noqa: BLE001
            raise Bad(f"{where}: not an Event: {e}")
        check_known(event, f"{where}: Event")
        if event.wall_time <= 0:
            raise Bad(f"{where}: wall_time {event.wall_time!r}")
        times.append(event.wall_time)
        what = event.WhichOneof("what")
        if index == 0 and what != "file_version":
            raise Bad(f"{where}: the first Event holds {what}, not file_version")
        if what == "file_version":
            lines.append(f"file_version {event.file_version}")
        elif what == "session_log":
            lines.append(f"session_log {event.step} {pb.SessionLog.SessionStatus.Name(event.session_log.status)}")
        elif what == "summary":
            for value in event.summary.value:
                if value.tag in HPARAMS_TAGS:
                    lines.extend(hparams_lines(pb, value, where))
                elif value.WhichOneof("value") == "simple_value":
                    lines.append(f"scalar {event.step} {value.tag} {value.simple_value!r}")
                else:
                    raise Bad(f"{where}: summary value {value.tag!r} is neither a scalar nor hparams")
        else:
            raise Bad(f"{where}: empty Event")
    if times:
        lines.append(f"wall_time {min(times)!r} {max(times)!r}")
    return lines


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    assert crc32c(b"123456789") == 0xE3069283  # the CRC32C check value
    path = sys.argv[1]
    with open(path, "rb") as f:
        data = f.read()
    with tempfile.TemporaryDirectory(prefix="lt_tensorboard_proto_") as tmp:
        try:
            pb = compile_proto(tmp)
            lines = decode(pb, data)
        except Bad as e:
            print(f"tensorboard_events.py: {path}: {e}", file=sys.stderr)
            return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
