"""Reads a TensorBoard log folder with TensorBoard's own reader (EventAccumulator).

Usage: tensorboard_reader.py LOG_DIR

Prints one line per fact TensorBoard's event processing gives, in its order:
  scalar <tag> <step> <value (repr of the float)>
  text <tag> <step> <the text>
  histogram <tag> <step> <min> <max> <num> <sum> <sum_squares> <buckets> <their total> <last limit>
  hparam <name> <value>                   (the HParams plugin's session_start_info)
Exits 1 if TensorBoard cannot read the folder.
"""
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util


def main():
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    for tag in tags["scalars"]:
        for e in acc.Scalars(tag):
            print("scalar", tag, e.step, repr(e.value))
    for tag in tags["tensors"]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "text":
            continue
        for e in acc.Tensors(tag):
            print("text", tag, e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode("utf-8"))
    # The HParams plugin's summaries carry their data in the metadata's content (no value).
    content = acc.PluginTagToContent("hparams").get("_hparams_/session_start_info")
    if content is not None:
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        for name, value in sorted(data.session_start_info.hparams.items()):
            print("hparam", name, getattr(value, value.WhichOneof("kind")))
    for tag in tags["histograms"]:
        for e in acc.Histograms(tag):
            h = e.histogram_value
            print("histogram", tag, e.step, repr(h.min), repr(h.max), repr(h.num), repr(h.sum), repr(h.sum_squares),
                  len(h.bucket), repr(sum(h.bucket)), repr(h.bucket_limit[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
