//! Cost of the protobuf transcoder per object (src/proto): encode a ~4 KiB pod's JSON
//! to kube-apiserver's protobuf bytes, decode them back, and the envelope around it.
//! Figures are in docs/protobuf.md.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use watchgate::proto;

const POD: &[u8] = include_bytes!("../tests/fixtures/proto/pod.json");

fn bench(c: &mut Criterion) {
    let pod = proto::lookup("", "v1", "Pod").expect("pods are in the table");
    let bytes = proto::encode(pod, POD).expect("fixture encodes");
    let mut g = c.benchmark_group("proto");
    g.throughput(Throughput::Bytes(POD.len() as u64));
    g.bench_function("encode_pod_json", |b| {
        b.iter(|| proto::encode(pod, black_box(POD)).unwrap())
    });
    g.bench_function("encode_object_envelope", |b| {
        b.iter(|| proto::encode_object("v1", "Pod", black_box(POD)).unwrap())
    });
    g.bench_function("decode_pod", |b| {
        b.iter(|| proto::decode(pod, black_box(&bytes), None).unwrap())
    });
    g.bench_function("partial_object_metadata", |b| {
        b.iter(|| proto::partial_object_metadata(black_box(POD)).unwrap())
    });
    g.bench_function("watch_frame", |b| {
        b.iter_batched(
            || proto::encode_unknown("v1", "Pod", &bytes),
            |env| proto::watch_frame("MODIFIED", black_box(&env)),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
