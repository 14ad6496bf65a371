// config.js - the knobs in force, where each value came from, and changing
// the runtime knobs from the page.
//
// The table is built once per set of knobs and then updated in place, so a
// value being typed into a knob's field survives the next poll.  Each poll's
// /config is compared with the previous one: a knob whose value or source
// changed is returned to app.js, which marks the charts and logs it (a
// change made by anyone: this page, curl, the program itself).
//
// Writes: a knob marked runtime gets a field (a list for choices and
// booleans) and a Set button when the process has a token
// (introspect.token "set": true) and the page has been given one.  Set sends
// POST /config {"name", "value"} with "Authorization: Bearer"; the server's
// answer is shown beside the knob as it is: the new value, or its reason
// for refusing (a wrong token, a value out of range, ...).

import {knobValue, el} from './format.js';

const SOURCE_HELP = {
  default: 'the built-in default',
  file: 'the SEFER_CONFIG file',
  env: 'a SEFER_* environment variable',
  runtime: 'changed while the program runs',
};

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

export class ConfigView {
  constructor(tbody, note, onSet) {
    this.tbody = tbody;
    this.note = note;
    this.onSet = onSet;
    this.rows = new Map(); // name -> {tr, value, source, editor, result}
    this.prev = null; // name -> knob, of the last poll
    this.names = '';
  }

  // Updates the table; returns the knobs that changed since the last poll.
  update(config, pageHasToken) {
    const knobs = config.knobs;
    const names = knobs.map((k) => k.name).join(' ');
    if (names !== this.names) this.build(knobs);
    this.names = names;
    const token = knobs.find((k) => k.name === 'introspect.token');
    const writable = !!(token && token.set);
    this.setNote(writable, pageHasToken);
    const changed = [];
    knobs.forEach((k) => {
      const old = this.prev && this.prev.get(k.name);
      if (old && (!same(old.value, k.value) || old.source !== k.source)) changed.push({knob: k, old});
      this.fill(k, writable, pageHasToken);
    });
    this.prev = new Map(knobs.map((k) => [k.name, k]));
    return changed;
  }

  setNote(writable, pageHasToken) {
    let text;
    if (!writable) text = 'Read-only: this process has no introspect.token. Start it with SEFER_INTROSPECT_TOKEN=... to change the runtime knobs from this page.';
    else if (!pageHasToken) text = 'Enter the token (top right) to change the knobs marked runtime.';
    else text = 'Runtime knobs change at once in the running process (POST /config); the server\u2019s answer shows beside the knob.';
    this.note.textContent = text;
  }

  build(knobs) {
    this.rows.clear();
    const trs = knobs.map((k) => {
      const tr = el('tr');
      tr.dataset.knob = k.name;
      const name = el('td', null, 'knob');
      name.append(el('code', k.name), el('div', k.env, 'env'));
      const r = {tr, value: el('td', null, 'value'), source: el('td'), dflt: el('td', knobValue(k, k.default), 'dim'),
        edit: el('td', null, 'edit'), result: el('div', null, 'result'), editor: null};
      if (k.runtime) r.editor = this.editor(k, r);
      else r.edit.append(el('span', 'set at start-up', 'dim'));
      r.edit.append(r.result);
      tr.append(name, r.value, r.source, r.dflt, r.edit, el('td', k.meaning, 'meaning'));
      this.rows.set(k.name, r);
      return tr;
    });
    this.tbody.replaceChildren(...trs);
  }

  editor(k, r) {
    const form = el('form', null, 'knob-form');
    let input;
    if (k.type === 'enum' || k.type === 'bool') {
      input = el('select');
      (k.type === 'bool' ? ['true', 'false'] : k.choices).forEach((c) => input.append(el('option', c)));
    } else {
      input = el('input');
      input.type = 'text';
      input.size = 10;
      input.placeholder = k.type === 'size' ? 'e.g. 64MiB' : k.type === 'duration' ? 'e.g. 250ms' : '';
    }
    input.name = 'value';
    input.setAttribute('aria-label', 'new value of ' + k.name);
    const button = el('button', 'Set');
    button.type = 'submit';
    form.append(input, button);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.submit(k.name, input, button, r.result);
    });
    r.edit.append(form);
    return {form, input, button};
  }

  async submit(name, input, button, result) {
    const value = input.value.trim();
    if (value === '') {
      this.show(result, false, 'type a value first');
      return;
    }
    button.disabled = true;
    this.show(result, null, 'setting...');
    const r = await this.onSet(name, value);
    button.disabled = false;
    if (r.ok) {
      this.show(result, true, 'set to ' + knobValue(r.json));
      if (input.tagName === 'INPUT') input.value = '';
      delete input.dataset.touched; // a list follows the server's value again
    } else if (r.kind === 'network') {
      this.show(result, false, 'no answer: ' + r.error);
    } else {
      this.show(result, false, r.status + ' ' + r.error + ': ' + r.reason);
    }
  }

  show(result, ok, text) {
    result.textContent = text;
    result.className = 'result' + (ok === true ? ' ok' : ok === false ? ' refused' : '');
  }

  fill(k, writable, pageHasToken) {
    const r = this.rows.get(k.name);
    if (!r) return;
    r.value.textContent = knobValue(k);
    r.source.replaceChildren(el('span', k.source, 'source source-' + k.source));
    r.source.title = SOURCE_HELP[k.source] || '';
    r.tr.classList.toggle('changed', k.source !== 'default');
    if (!r.editor) return;
    r.editor.form.hidden = !writable;
    r.editor.input.disabled = r.editor.button.disabled = !pageHasToken;
    const sel = r.editor.input;
    if (sel.tagName === 'SELECT' && document.activeElement !== sel && !sel.dataset.touched) sel.value = String(k.value);
    if (sel.tagName === 'SELECT' && !sel.dataset.wired) {
      sel.dataset.wired = '1';
      sel.addEventListener('change', () => (sel.dataset.touched = '1'));
    }
  }
}
