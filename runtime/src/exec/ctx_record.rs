//! Command recording on a [`Ctx`]: copies, dispatches (parameter arena, bind groups) and the
//! submit.

use super::bind_cache::BindGroupKey;
use super::{Ctx, GpuTensor};
use crate::error::{Error, Result};
use crate::gpu::{Bound, Params};
use std::rc::Rc;

pub(super) enum Cmd {
    Dispatch {
        pipeline: Rc<crate::gpu::Pipeline>,
        group: wgpu::BindGroup,
        wg: (u32, u32),
    },
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
}

/// Words reserved per dispatch in the parameter arena (256-byte aligned slots).
const META_ALIGN_WORDS: usize = 64;

impl Ctx<'_> {
    /// Records a copy of `src`'s bytes (its whole range) to the start of `dst`'s range, in order
    /// with the dispatches around it. Both ranges must start and end on 4-byte boundaries, and
    /// `dst`'s buffer must hold them at that offset.
    pub fn copy(&mut self, src: &GpuTensor, dst: &GpuTensor) -> Result<()> {
        let (so, bytes) = (src.byte_offset(), src.storage().bytes(src.numel()));
        let (d_off, d_cap) = match dst.view {
            Some(v) => v,
            None => (0, dst.capacity()),
        };
        if src.split.is_some() || dst.split.is_some() {
            return Err(Error::Invalid(
                "cannot copy tensors split into row ranges".into(),
            ));
        }
        if so % 4 != 0 || d_off % 4 != 0 || bytes % 4 != 0 || bytes > d_cap {
            return Err(Error::Invalid(format!(
                "cannot copy {src:?} ({bytes} bytes at {so}) into {dst:?} ({d_cap} bytes at {d_off})"
            )));
        }
        if bytes > 0 {
            self.cmds.push(Cmd::Copy {
                src: src.buffer().clone(),
                src_offset: so,
                dst: dst.buffer().clone(),
                dst_offset: d_off,
                size: bytes,
            });
        }
        Ok(())
    }

    /// Records a dispatch of the bound kernel over `invocations` invocations (a 2-D grid when
    /// needed), with parameters `params` (the kernel's declared [`Params`] type).
    pub fn launch<P: Params>(
        &mut self,
        bound: Bound<'_, '_>,
        params: &P,
        invocations: u64,
    ) -> Result<()> {
        let k = bound.k;
        let wg = self.grid(k.name(), u64::from(k.workgroup_size()), invocations)?;
        self.launch_groups(bound, params, wg)
    }

    /// Records an element-mapped kernel (`Kernel::mapped`) over the first `n` elements of its
    /// output `out`: one invocation per output word.
    pub fn launch_mapped<P: Params>(
        &mut self,
        bound: Bound<'_, '_>,
        params: &P,
        n: usize,
        out: &GpuTensor,
    ) -> Result<()> {
        let words = n.div_ceil(out.storage().per_word() as usize) as u64;
        self.launch(bound, params, words)
    }

    /// Records a dispatch of the bound kernel with an explicit workgroup grid.
    pub fn launch_groups<P: Params>(
        &mut self,
        bound: Bound<'_, '_>,
        params: &P,
        wg: (u32, u32),
    ) -> Result<()> {
        let k = bound.k;
        match &k.kernel.block {
            Some((t, _)) if *t == std::any::TypeId::of::<P>() => {}
            _ => {
                return Err(Error::Gpu(format!(
                    "kernel {}: its parameters are not a {}",
                    k.name(),
                    std::any::type_name::<P>()
                )));
            }
        }
        let tensors = bound.tensors()?;
        let words: &[u32] = bytemuck::cast_slice(std::slice::from_ref(params));
        self.record(&k.pipeline, k.name(), &tensors, words, wg)
    }

    /// The workgroup grid for `invocations` invocations of workgroups of `wg_size`: one row,
    /// or a 2-D grid past the adapter's per-dimension limit (`(0, 0)`: nothing to run).
    pub fn grid(&self, name: &str, wg_size: u64, invocations: u64) -> Result<(u32, u32)> {
        let groups = invocations.div_ceil(wg_size);
        if groups == 0 {
            return Ok((0, 0));
        }
        let maxd = u64::from(self.gpu.limits.max_compute_workgroups_per_dimension);
        let (x, y) = if groups <= maxd {
            (groups, 1)
        } else {
            (maxd, groups.div_ceil(maxd))
        };
        if y > maxd {
            return Err(Error::Gpu(format!(
                "kernel {name}: {invocations} invocations exceed the grid limits"
            )));
        }
        Ok((x as u32, y as u32))
    }

    /// Records one dispatch: its parameter words into the arena, its bind group (cached).
    fn record(
        &mut self,
        pipeline: &Rc<crate::gpu::Pipeline>,
        name: &'static str,
        tensors: &[&GpuTensor],
        meta: &[u32],
        wg: (u32, u32),
    ) -> Result<()> {
        if wg.0 == 0 || wg.1 == 0 {
            return Ok(());
        }
        if meta.len() > crate::gpu::PARAM_WORDS {
            return Err(Error::Gpu(format!(
                "kernel {name}: {} parameter words exceed {}",
                meta.len(),
                crate::gpu::PARAM_WORDS
            )));
        }
        let pipeline = pipeline.clone();
        let meta_words = meta.len().max(1).next_multiple_of(META_ALIGN_WORDS);
        let cap_words = (self.meta_buf.borrow().size() / 4) as usize;
        if self.meta.len() + meta_words > cap_words {
            self.flush();
            if meta_words > cap_words {
                let new = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("meta arena"),
                    size: (meta_words * 4).next_power_of_two() as u64,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                *self.meta_buf.borrow_mut() = new;
            }
        }
        if self.meta.capacity() == 0 {
            // A step's parameters fill much of the arena: reserve it once, not by doubling.
            self.meta.reserve(cap_words.max(meta_words));
            self.cmds.reserve(128);
        }
        let off = self.meta.len();
        self.meta.extend_from_slice(meta);
        self.meta.resize(off + meta_words, 0);
        let meta_buf = self.meta_buf.borrow();
        let meta_range = ((off * 4) as u64, (meta_words * 4) as u64);
        let mut ranges: Vec<(wgpu::Buffer, u64, u64)> = Vec::with_capacity(tensors.len() + 1);
        ranges.extend(tensors.iter().map(|t| {
            let (offset, size) = t.range();
            (t.buf.buffer.clone(), offset, size)
        }));
        ranges.push((meta_buf.clone(), meta_range.0, meta_range.1));
        let key = BindGroupKey {
            pipeline: Rc::as_ptr(&pipeline) as usize,
            ranges,
        };
        let mut cache = self.bind_groups.borrow_mut();
        let epoch = cache.epoch;
        let group = match cache.groups.get_mut(&key) {
            Some((group, used, _)) => {
                *used = epoch;
                group.clone()
            }
            None => {
                let entries: Vec<wgpu::BindGroupEntry<'_>> = key
                    .ranges
                    .iter()
                    .enumerate()
                    .map(|(i, (buffer, offset, size))| wgpu::BindGroupEntry {
                        binding: i as u32,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer,
                            offset: *offset,
                            size: std::num::NonZeroU64::new(*size),
                        }),
                    })
                    .collect();
                let group = self
                    .gpu
                    .device
                    .create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some(name),
                        layout: &pipeline.layout,
                        entries: &entries,
                    });
                self.gpu
                    .counters
                    .bind_groups_created
                    .set(self.gpu.counters.bind_groups_created.get() + 1);
                cache
                    .groups
                    .insert(key, (group.clone(), epoch, pipeline.clone()));
                group
            }
        };
        drop(cache);
        drop(meta_buf);
        self.gpu.count_dispatch();
        self.cmds.push(Cmd::Dispatch {
            pipeline,
            group,
            wg,
        });
        Ok(())
    }

    /// Submits everything recorded so far (one submit); returns its index (`None`: nothing was
    /// recorded, nothing submitted).
    pub fn flush(&mut self) -> Option<wgpu::SubmissionIndex> {
        if self.cmds.is_empty() {
            return None;
        }
        if !self.meta.is_empty() {
            self.gpu.queue.write_buffer(
                &self.meta_buf.borrow(),
                0,
                bytemuck::cast_slice(&self.meta),
            );
        }
        let mut enc = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("run") });
        let cmds = std::mem::take(&mut self.cmds);
        // Reads (copies alone) do not age the bind groups.
        let dispatched = cmds.iter().any(|c| matches!(c, Cmd::Dispatch { .. }));
        let mut i = 0;
        while i < cmds.len() {
            match &cmds[i] {
                Cmd::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => {
                    enc.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *size);
                    i += 1;
                }
                Cmd::Dispatch { .. } => {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: None,
                    });
                    while let Some(Cmd::Dispatch {
                        pipeline,
                        group,
                        wg,
                    }) = cmds.get(i)
                    {
                        pass.set_pipeline(&pipeline.pipeline);
                        pass.set_bind_group(0, group, &[]);
                        pass.dispatch_workgroups(wg.0, wg.1, 1);
                        i += 1;
                    }
                }
            }
        }
        let index = self.gpu.queue.submit(Some(enc.finish()));
        self.gpu.count_submit();
        if dispatched {
            self.bind_groups.borrow_mut().end_epoch();
        }
        self.meta.clear();
        self.pool.borrow_mut().settle();
        Some(index)
    }
}
