enable subgroups;
const workgroup_size_x: u32 = 64;
const workgroup_size_y: u32 = 1;
const workgroup_size_z: u32 = 1;
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> present_key: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> present_value: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> seqlens_k: array<i32>;
@group(0) @binding(4) var<storage, read_write> output: array<vec4<f32>>;
struct Uniforms {
  new_sequence_length: u32,
  total_sequence_length: u32,
  present_sequence_length: u32,
  batch_size: u32,
  n_reps: u32,
  alpha: f32,
  num_seq_tile: u32,
  attn_bias_dim0: u32,
  attn_bias_dim1: u32,
  attn_bias_dim3: u32,
  local_window_size: u32
};
@group(0) @binding(5) var<uniform> uniforms: Uniforms;

alias q_value_t = vec4<f32>;
alias q_element_t = f32;

const head_size : u32 = 16;
const num_heads : u32 = 1;

fn get_total_sequence_length(batch_idx: u32) -> u32 {
  return u32(seqlens_k[batch_idx]) + 1u;
}
fn is_key_visible(k_idx: u32, local_window_start: u32, causal_end: u32) -> bool {
  return k_idx >= local_window_start && k_idx < causal_end;
}

alias qk_precision = f32;
const qk_min_value = qk_precision(-3.4028234663852886e+38f);

const max_k_step : u32 = 16;
const vec_factor : u32 = 4u;
const head_size_vec : u32 = head_size / vec_factor;

var<workgroup> k_tile : array<array<q_value_t, head_size_vec>, max_k_step>;
var<workgroup> v_tile : array<array<q_value_t, head_size_vec>, max_k_step>;
var<private> q_tile : array<q_value_t, head_size_vec>;

fn loadq(batch_idx : u32, q_idx_global : u32, head_idx : u32, alpha : q_element_t) {
  let offset = batch_idx * uniforms.new_sequence_length * head_size_vec * num_heads +
               q_idx_global * head_size_vec * num_heads +
               head_idx * head_size_vec;
  for (var idx : u32 = 0; idx < head_size_vec; idx++) {
    q_tile[idx] = q[idx + offset] * alpha;
  }
}

fn loadk(k_start : u32, batch_head_idx : u32, local_idx : u32, k_step : u32, total_seq : u32) {
  let offset = batch_head_idx / uniforms.n_reps * uniforms.present_sequence_length * head_size_vec +
               k_start * head_size_vec;
  for (var idx : u32 = local_idx; idx < head_size_vec * k_step; idx += workgroup_size_x) {
    let slot = u32(idx / head_size_vec);
    let val = select(q_value_t(0), present_key[offset + idx], k_start + slot < total_seq);
    k_tile[slot][idx % head_size_vec] = val;
  }
}

fn loadv(v_start : u32, batch_head_idx : u32, local_idx : u32, v_step : u32, total_seq : u32) {
  let offset = batch_head_idx / uniforms.n_reps * uniforms.present_sequence_length * head_size_vec +
               v_start * head_size_vec;
  for (var idx : u32 = local_idx; idx < head_size_vec * v_step; idx += workgroup_size_x) {
    let slot = u32(idx / head_size_vec);
    let val = select(q_value_t(0), present_value[offset + idx], v_start + slot < total_seq);
    v_tile[slot][idx % head_size_vec] = val;
  }
}

var<private> o_tile : array<q_value_t, head_size_vec>;
fn writeo(batch_idx : u32, o_idx_global : u32, head_idx : u32) {
  let offset = batch_idx * uniforms.new_sequence_length * num_heads * head_size_vec +
               o_idx_global * num_heads * head_size_vec + head_idx * head_size_vec;
  for (var idx : u32 = 0; idx < head_size_vec; idx++) {
    output[offset + idx] = o_tile[idx];
  }
}
fn loadAttentionBias(batch_idx : u32, q_idx_global : u32, k_idx_global : u32, head_idx : u32, total_seq : u32) -> vec4<qk_precision> {
  return vec4<qk_precision>(0);
}
fn fetchKTile(k_idx: u32, vec_idx: u32, k_val: q_value_t) -> vec4<qk_precision> {
    return vec4<qk_precision>(subgroupShuffle(k_val, k_idx));
}

fn fetchVTile(k_idx: u32, vec_idx: u32, v_val: q_value_t) -> q_value_t {
    return subgroupShuffle(v_val, k_idx);
}


@compute @workgroup_size(workgroup_size_x, workgroup_size_y, workgroup_size_z)
fn main(@builtin(global_invocation_id) global_id : vec3<u32>,
        @builtin(workgroup_id) workgroup_id : vec3<u32>,
        @builtin(local_invocation_index) local_idx : u32,
        @builtin(local_invocation_id) local_id : vec3<u32>,
        @builtin(subgroup_invocation_id) sg_id : u32,
        @builtin(subgroup_size) sg_size : u32,
        @builtin(num_workgroups) num_workgroups : vec3<u32>) {
  let workgroup_idx = workgroup_id.z * num_workgroups[0] * num_workgroups[1] + workgroup_id.y * num_workgroups[0] + workgroup_id.x;
  let global_idx = workgroup_idx * (workgroup_size_x * workgroup_size_y * workgroup_size_z) + local_idx;

  let batch_head_idx = u32(workgroup_idx / uniforms.num_seq_tile);
  let head_idx = batch_head_idx % num_heads;
  let batch_idx = batch_head_idx / num_heads;

  if (batch_idx >= uniforms.batch_size) {
    return;
  }

  let query_tile_start = (workgroup_idx % uniforms.num_seq_tile) * workgroup_size_x;
  let q_idx_global = query_tile_start + local_idx;
  let valid_q = q_idx_global < uniforms.new_sequence_length;
  if (valid_q) {
    loadq(batch_idx, q_idx_global, head_idx, q_element_t(uniforms.alpha));
  }

  var previous_max : qk_precision = qk_min_value;
  var previous_denom : qk_precision = 0;
  let total_sequence_length = get_total_sequence_length(batch_idx);

  let past_sequence_length = select(total_sequence_length - uniforms.new_sequence_length,
                                    0u,
                                    total_sequence_length <= uniforms.new_sequence_length);
  let max_causal_len_for_workgroup = past_sequence_length +
                                     (workgroup_idx % uniforms.num_seq_tile + 1) * workgroup_size_x;
  let loop_bound = min(total_sequence_length, max_causal_len_for_workgroup);
  let seq_causal_length = past_sequence_length + q_idx_global + 1;
  let first_query_window_start = 0u;
  let local_window_start = 0u;
  let capped_sg_id = min(sg_id, max_k_step - 1u);
  let capped_sg_size = min(sg_size, max_k_step);

  let aligned_window_start = (first_query_window_start / capped_sg_size) * capped_sg_size;
  for (var k_start = aligned_window_start; k_start < loop_bound; k_start += capped_sg_size) {
    workgroupBarrier();
    loadk(k_start, batch_head_idx, local_idx, capped_sg_size, total_sequence_length);
    loadv(k_start, batch_head_idx, local_idx, capped_sg_size, total_sequence_length);
    workgroupBarrier();

    var qk_1 : vec4<qk_precision>;
    var qk_2 : vec4<qk_precision>;
    var qk_3 : vec4<qk_precision>;
    var qk_4 : vec4<qk_precision>;
    if (sg_size > 8) {
      for (var i : u32 = 0u; i < head_size_vec; i++) {
        var k_local = k_tile[capped_sg_id][i];
        let q_own = vec4<qk_precision>(q_tile[i]);
        qk_1[0] += dot(q_own, fetchKTile(0, i, k_local));
        qk_1[1] += dot(q_own, fetchKTile(1, i, k_local));
        qk_1[2] += dot(q_own, fetchKTile(2, i, k_local));
        qk_1[3] += dot(q_own, fetchKTile(3, i, k_local));
        qk_2[0] += dot(q_own, fetchKTile(4, i, k_local));
        qk_2[1] += dot(q_own, fetchKTile(5, i, k_local));
        qk_2[2] += dot(q_own, fetchKTile(6, i, k_local));
        qk_2[3] += dot(q_own, fetchKTile(7, i, k_local));
        qk_3[0] += dot(q_own, fetchKTile(8, i, k_local));
        qk_3[1] += dot(q_own, fetchKTile(9, i, k_local));
        qk_3[2] += dot(q_own, fetchKTile(10, i, k_local));
        qk_3[3] += dot(q_own, fetchKTile(11, i, k_local));
        qk_4[0] += dot(q_own, fetchKTile(12, i, k_local));
        qk_4[1] += dot(q_own, fetchKTile(13, i, k_local));
        qk_4[2] += dot(q_own, fetchKTile(14, i, k_local));
        qk_4[3] += dot(q_own, fetchKTile(15, i, k_local));
      }
    } else {
      for (var i : u32 = 0u; i < head_size_vec; i++) {
        var k_local = k_tile[capped_sg_id][i];
        let q_own = vec4<qk_precision>(q_tile[i]);
        qk_1[0] += dot(q_own, fetchKTile(0, i, k_local));
        qk_1[1] += dot(q_own, fetchKTile(1, i, k_local));
        qk_1[2] += dot(q_own, fetchKTile(2, i, k_local));
        qk_1[3] += dot(q_own, fetchKTile(3, i, k_local));
        qk_2[0] += dot(q_own, fetchKTile(4, i, k_local));
        qk_2[1] += dot(q_own, fetchKTile(5, i, k_local));
        qk_2[2] += dot(q_own, fetchKTile(6, i, k_local));
        qk_2[3] += dot(q_own, fetchKTile(7, i, k_local));
      }
    }
    qk_1 = qk_1 + loadAttentionBias(batch_idx, q_idx_global, k_start, head_idx, total_sequence_length);
    qk_2 = qk_2 + loadAttentionBias(
        batch_idx, q_idx_global, k_start + 4, head_idx, total_sequence_length);
    if (sg_size > 8) {
      qk_3 = qk_3 + loadAttentionBias(
          batch_idx, q_idx_global, k_start + 8, head_idx, total_sequence_length);
      qk_4 = qk_4 + loadAttentionBias(
          batch_idx, q_idx_global, k_start + 12, head_idx, total_sequence_length);
    }

    qk_1[0] = select(qk_min_value, qk_1[0], is_key_visible(k_start + 0, local_window_start, seq_causal_length));
    qk_1[1] = select(qk_min_value, qk_1[1], is_key_visible(k_start + 1, local_window_start, seq_causal_length));
    qk_1[2] = select(qk_min_value, qk_1[2], is_key_visible(k_start + 2, local_window_start, seq_causal_length));
    qk_1[3] = select(qk_min_value, qk_1[3], is_key_visible(k_start + 3, local_window_start, seq_causal_length));
    qk_2[0] = select(qk_min_value, qk_2[0], is_key_visible(k_start + 4, local_window_start, seq_causal_length));
    qk_2[1] = select(qk_min_value, qk_2[1], is_key_visible(k_start + 5, local_window_start, seq_causal_length));
    qk_2[2] = select(qk_min_value, qk_2[2], is_key_visible(k_start + 6, local_window_start, seq_causal_length));
    qk_2[3] = select(qk_min_value, qk_2[3], is_key_visible(k_start + 7, local_window_start, seq_causal_length));
    if (sg_size > 8) {
      qk_3[0] = select(qk_min_value, qk_3[0], is_key_visible(k_start + 8, local_window_start, seq_causal_length));
      qk_3[1] = select(qk_min_value, qk_3[1], is_key_visible(k_start + 9, local_window_start, seq_causal_length));
      qk_3[2] = select(qk_min_value, qk_3[2], is_key_visible(k_start + 10, local_window_start, seq_causal_length));
      qk_3[3] = select(qk_min_value, qk_3[3], is_key_visible(k_start + 11, local_window_start, seq_causal_length));
      qk_4[0] = select(qk_min_value, qk_4[0], is_key_visible(k_start + 12, local_window_start, seq_causal_length));
      qk_4[1] = select(qk_min_value, qk_4[1], is_key_visible(k_start + 13, local_window_start, seq_causal_length));
      qk_4[2] = select(qk_min_value, qk_4[2], is_key_visible(k_start + 14, local_window_start, seq_causal_length));
      qk_4[3] = select(qk_min_value, qk_4[3], is_key_visible(k_start + 15, local_window_start, seq_causal_length));
    }

    var local_max_temp = max(qk_1, qk_2);
    if (sg_size > 8) {
      local_max_temp = max(local_max_temp, qk_3);
      local_max_temp = max(local_max_temp, qk_4);
    }
    let local_max = max(max(local_max_temp.x, local_max_temp.y), max(local_max_temp.z, local_max_temp.w));
    let new_max = max(previous_max, local_max);
    qk_1 = exp(qk_1 - vec4<qk_precision>(new_max));
    qk_2 = exp(qk_2 - vec4<qk_precision>(new_max));
    if (sg_size > 8) {
      qk_3 = exp(qk_3 - vec4<qk_precision>(new_max));
      qk_4 = exp(qk_4 - vec4<qk_precision>(new_max));
    }
    let sum_vec = qk_1 + qk_2 + qk_3 + qk_4;
    let sum = sum_vec.x + sum_vec.y + sum_vec.z + sum_vec.w;

    let dleft = previous_denom * exp(previous_max - new_max);
    var d = dleft + sum;
    d = select(d, qk_precision(0.0000001), d == 0);
    qk_1 = qk_1 / d;
    qk_2 = qk_2 / d;
    if (sg_size > 8) {
      qk_3 = qk_3 / d;
      qk_4 = qk_4 / d;
    }
    previous_max = new_max;
    previous_denom = d;
    let o_ratio = q_element_t(dleft / d);
    let qk_1_value = q_value_t(qk_1);
    let qk_2_value = q_value_t(qk_2);
    let qk_3_value = q_value_t(qk_3);
    let qk_4_value = q_value_t(qk_4);

    if (sg_size > 8) {
      for (var i : u32 = 0; i < head_size_vec; i++) {
        var val = v_tile[capped_sg_id][i];
        var sum = fetchVTile(0, i, val) * qk_1_value[0];
        sum += fetchVTile(1, i, val) * qk_1_value[1];
        sum += fetchVTile(2, i, val) * qk_1_value[2];
        sum += fetchVTile(3, i, val) * qk_1_value[3];
        sum += fetchVTile(4, i, val) * qk_2_value[0];
        sum += fetchVTile(5, i, val) * qk_2_value[1];
        sum += fetchVTile(6, i, val) * qk_2_value[2];
        sum += fetchVTile(7, i, val) * qk_2_value[3];
        sum += fetchVTile(8, i, val) * qk_3_value[0];
        sum += fetchVTile(9, i, val) * qk_3_value[1];
        sum += fetchVTile(10, i, val) * qk_3_value[2];
        sum += fetchVTile(11, i, val) * qk_3_value[3];
        sum += fetchVTile(12, i, val) * qk_4_value[0];
        sum += fetchVTile(13, i, val) * qk_4_value[1];
        sum += fetchVTile(14, i, val) * qk_4_value[2];
        sum += fetchVTile(15, i, val) * qk_4_value[3];
        o_tile[i] = o_tile[i] * o_ratio + sum;
      }
    } else {
      for (var i : u32 = 0; i < head_size_vec; i++) {
        var val = v_tile[capped_sg_id][i];
        var sum = fetchVTile(0, i, val) * qk_1_value[0];
        sum += fetchVTile(1, i, val) * qk_1_value[1];
        sum += fetchVTile(2, i, val) * qk_1_value[2];
        sum += fetchVTile(3, i, val) * qk_1_value[3];
        sum += fetchVTile(4, i, val) * qk_2_value[0];
        sum += fetchVTile(5, i, val) * qk_2_value[1];
        sum += fetchVTile(6, i, val) * qk_2_value[2];
        sum += fetchVTile(7, i, val) * qk_2_value[3];
        o_tile[i] = o_tile[i] * o_ratio + sum;
      }
    }
  }

  if (valid_q) {
    writeo(batch_idx, q_idx_global, head_idx);
  }

}
