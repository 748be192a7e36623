#!/usr/bin/env python3
"""An event file read as TensorBoard reads it, by code that shares nothing
with loom's writer: the records' framing and masked CRC-32C checked here
(a bitwise CRC, not the writer's table), and the Event, Summary, Value and
HistogramProto messages decoded by protobuf itself (Debian's
python3-protobuf), from definitions built below field by field as
TensorFlow's event.proto and summary.proto declare them.

    event_file_reader.py FILE   # prints one line per event: step, tag, value
"""
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    sys.exit("event_file_reader: python3-protobuf is missing (tools/setup.sh installs it)")


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the catalogue's check value


def event_class():
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="loom_test_event.proto", package="tensorboard", syntax="proto3")

    def message(name, fields):
        m = proto.message_type.add(name=name)
        for fname, number, ftype, label, type_name, oneof in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
            if oneof is not None:
                if not m.oneof_decl or m.oneof_decl[-1].name != oneof:
                    m.oneof_decl.add(name=oneof)
                f.oneof_index = len(m.oneof_decl) - 1
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    hist = message("HistogramProto", [
        ("min", 1, F.TYPE_DOUBLE, opt, None, None),
        ("max", 2, F.TYPE_DOUBLE, opt, None, None),
        ("num", 3, F.TYPE_DOUBLE, opt, None, None),
        ("sum", 4, F.TYPE_DOUBLE, opt, None, None),
        ("sum_squares", 5, F.TYPE_DOUBLE, opt, None, None),
        ("bucket_limit", 6, F.TYPE_DOUBLE, rep, None, None),
        ("bucket", 7, F.TYPE_DOUBLE, rep, None, None),
    ])
    for f in hist.field[5:]:
        f.options.packed = True
    summary = message("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".tensorboard.Summary.Value", None)])
    value = summary.nested_type.add(name="Value")
    for fname, number, ftype, type_name in [("tag", 1, F.TYPE_STRING, None),
                                            ("simple_value", 2, F.TYPE_FLOAT, None),
                                            ("histo", 5, F.TYPE_MESSAGE, ".tensorboard.HistogramProto")]:
        f = value.field.add(name=fname, number=number, type=ftype, label=opt)
        if type_name:
            f.type_name = type_name
        if fname != "tag":
            f.oneof_index = 0
    value.oneof_decl.add(name="value")
    message("Event", [
        ("wall_time", 1, F.TYPE_DOUBLE, opt, None, None),
        ("step", 2, F.TYPE_INT64, opt, None, None),
        ("file_version", 3, F.TYPE_STRING, opt, None, "what"),
        ("summary", 5, F.TYPE_MESSAGE, opt, ".tensorboard.Summary", "what"),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("tensorboard.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def records(data):
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            sys.exit("event_file_reader: %d bytes left at offset %d, less than a record's header" % (len(data) - at, at))
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        if length_crc != masked(crc32c(data[at:at + 8])):
            sys.exit("event_file_reader: bad length CRC at offset %d" % at)
        body = data[at + 12:at + 12 + length]
        if len(body) != length or len(data) < at + 16 + length:
            sys.exit("event_file_reader: record at offset %d is cut short" % at)
        (data_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        if data_crc != masked(crc32c(body)):
            sys.exit("event_file_reader: bad data CRC at offset %d" % at)
        yield body
        at += 16 + length


def main():
    Event = event_class()
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    for body in records(data):
        event = Event()
        event.ParseFromString(body)
        what = event.WhichOneof("what")
        if what == "file_version":
            print("%d file_version %s wall_time_ok=%s" % (event.step, event.file_version, event.wall_time > 1.6e9))
            continue
        for v in event.summary.value:
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                print("%d %s %.6g" % (event.step, v.tag, v.simple_value))
            else:
                h = v.histo
                print("%d %s histo min=%g max=%g num=%g sum=%g sum_squares=%g limits=%s buckets=%s" % (
                    event.step, v.tag, h.min, h.max, h.num, h.sum, h.sum_squares,
                    ",".join("%g" % x for x in h.bucket_limit), ",".join("%g" % x for x in h.bucket)))


if __name__ == "__main__":
    main()
