// flame.js - the flame graph of live bytes by call stack, from
// /profile/stacks, drawn by d3-flame-graph (with d3: both are embedded
// from webui/node_modules, as uPlot is; docs/dashboard.md).
//
// /profile/stacks gives one record per site: its estimated live bytes and
// its frames from the outermost (main, _start) in.  Equal prefixes are
// merged into one tree: a node's width is the bytes of every stack through
// it, so the widest boxes at the top are the functions that hold the most.
// The tree is rebuilt only when the stacks changed, so a graph the user
// zoomed into (a click on a box) stays zoomed while the process holds
// still.  Names come from the process and are drawn as text (the library
// sets them with textContent and SVG titles).
//
// The container's data-frames carries the number of boxes drawn and
// data-total the bytes at the root (the browser test reads them, and that
// the top row of boxes is at the top of the graph).

import {bytes, count} from './format.js';

// {name, value, children} with value = bytes through the node.
export function stackTree(stacks) {
  const root = {name: 'all live bytes', value: 0, children: []};
  const index = new Map([[root, new Map()]]);
  for (const s of stacks) {
    root.value += s.bytes;
    let node = root;
    for (const frame of s.frames) {
      const kids = index.get(node);
      let next = kids.get(frame);
      if (!next) {
        next = {name: frame, value: 0, children: []};
        kids.set(frame, next);
        index.set(next, new Map());
        node.children.push(next);
      }
      next.value += s.bytes;
      node = next;
    }
  }
  return root;
}

function countNodes(node) {
  return 1 + node.children.reduce((n, c) => n + countNodes(c), 0);
}

export class Flame {
  constructor(box, note) {
    this.box = box;
    this.note = note;
    this.total = 0;
    this.chart = null;
    this.width = 0;
    this.key = '';
  }

  // Whether the libraries loaded (the page says so if not).
  available() {
    return typeof window.d3 === 'object' && window.flamegraph && typeof window.flamegraph.default === 'function';
  }

  make(width) {
    const chart = window.flamegraph.default()
        .width(width)
        .cellHeight(18)
        // as tall as the stacks drawn, at every update: the library sizes
        // the graph at its first draw only, so a process whose stacks grew
        // shallower later drew a few rows at the bottom of an empty box
        .resetHeightOnZoom(true)
        .minFrameSize(2)
        .transitionDuration(0)
        .sort(true)
        .title('');
    // the box's title (hover): its function, bytes and share of all
    chart.setLabelHandler((d) => d.data.name + ': ' + bytes(d.value) +
        (this.total ? ' (' + (100 * d.value / this.total).toFixed(1) + ' %)' : ''));
    return chart;
  }

  update(reply) {
    if (!this.available()) {
      this.note.textContent = 'The flame-graph library did not load: no flame graph (the table still works).';
      return;
    }
    const key = JSON.stringify(reply.stacks);
    const width = Math.max(320, this.box.clientWidth || 960);
    if (key === this.key && Math.abs(width - this.width) < 40) return;
    const tree = stackTree(reply.stacks);
    this.key = key;
    if (!reply.stacks.length) { // nothing to draw: no box of zero width
      if (this.chart) this.chart.destroy();
      this.chart = null;
      this.note.textContent = 'No sampled block is live.';
      this.box.dataset.frames = '0';
      this.box.dataset.total = '0';
      return;
    }
    this.total = tree.value;
    this.note.textContent = count(reply.stacks.length) + ' stacks, ' + bytes(tree.value) +
        ' estimated live. Click a box to zoom into it, the bottom box to zoom out.';
    if (!this.chart || Math.abs(width - this.width) >= 40) {
      if (this.chart) this.chart.destroy();
      this.chart = this.make(width);
      this.width = width;
      window.d3.select(this.box).datum(tree).call(this.chart);
    } else {
      this.chart.update(tree);
    }
    this.box.dataset.frames = String(countNodes(tree));
    this.box.dataset.total = String(tree.value);
  }
}
