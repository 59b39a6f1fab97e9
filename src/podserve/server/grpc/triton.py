"""Triton's model-configuration and statistics extensions as gRPC messages; the same
content as the REST bodies (`protocol/v2/triton.py`), whose helpers this reuses."""

from __future__ import annotations

from collections.abc import Iterable

from podserve.core.tensors import TensorSpec
from podserve.core.triton import Duration, ModelConfigView, ModelStatistics
from podserve.protocol.v2.triton import config_dims, triton_datatype
from podserve.server.grpc._generated import inference_pb2 as pb


def encode_model_config(view: ModelConfigView) -> pb.ModelConfigResponse:
    batches = view.max_batch_size > 0

    def reshape(reshaped: bool) -> pb.ModelTensorReshape | None:
        return pb.ModelTensorReshape(shape=[]) if reshaped else None

    def model_input(spec: TensorSpec) -> pb.ModelInput:
        dims, reshaped = config_dims(spec, batches)
        return pb.ModelInput(
            name=spec.name,
            data_type=triton_datatype(spec.datatype),
            format=pb.ModelInput.FORMAT_NONE,
            dims=dims,
            reshape=reshape(reshaped),
        )

    def model_output(spec: TensorSpec) -> pb.ModelOutput:
        dims, reshaped = config_dims(spec, batches)
        return pb.ModelOutput(
            name=spec.name,
            data_type=triton_datatype(spec.datatype),
            dims=dims,
            reshape=reshape(reshaped),
        )

    config = pb.ModelConfig(
        name=view.name,
        platform=view.platform,
        backend=view.backend,
        max_batch_size=view.max_batch_size,
        input=[model_input(s) for s in view.inputs],
        output=[model_output(s) for s in view.outputs],
        instance_group=[
            pb.ModelInstanceGroup(
                name=view.name, count=view.instance_count, kind=pb.ModelInstanceGroup.KIND_CPU
            )
        ],
        parameters={k: pb.ModelParameter(string_value=v) for k, v in view.parameters.items()},
    )
    if view.dynamic_batching:
        config.dynamic_batching.CopyFrom(
            pb.ModelDynamicBatching(
                preferred_batch_size=list(view.preferred_batch_sizes),
                max_queue_delay_microseconds=view.max_queue_delay_us,
            )
        )
    return pb.ModelConfigResponse(config=config)


def _duration(d: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def encode_model_statistics(stats: Iterable[ModelStatistics]) -> pb.ModelStatisticsResponse:
    return pb.ModelStatisticsResponse(
        model_stats=[
            pb.ModelStatistics(
                name=s.name,
                version=s.version,
                last_inference=s.last_inference_ms,
                inference_count=s.inference_count,
                execution_count=s.execution_count,
                inference_stats=pb.InferStatistics(
                    success=_duration(s.success),
                    fail=_duration(s.fail),
                    queue=_duration(s.queue),
                    compute_input=_duration(s.compute_input),
                    compute_infer=_duration(s.compute_infer),
                    compute_output=_duration(s.compute_output),
                    cache_hit=pb.StatisticDuration(),
                    cache_miss=pb.StatisticDuration(),
                ),
                batch_stats=[
                    pb.InferBatchStatistics(
                        batch_size=b.batch_size,
                        compute_input=_duration(b.compute_input),
                        compute_infer=_duration(b.compute_infer),
                        compute_output=_duration(b.compute_output),
                    )
                    for b in s.batches
                ],
            )
            for s in stats
        ]
    )
