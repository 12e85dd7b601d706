// The live tap: reads the stream the server serves at the form's
// data-stream URL (Server-Sent Events) and shows one row per request,
// filled in as its response starts and ends. Text only (textContent):
// what a tapped request carries is never parsed as HTML.
'use strict';
(function () {
  const form = document.getElementById('tap-form');
  const rows = document.getElementById('tap-rows');
  const status = document.getElementById('tap-status');
  const url = form && form.dataset.stream;
  if (!url) {
    return;
  }
  const maxRows = 500;
  const byID = new Map();
  let seen = 0;
  let dropped = 0;

  // A peer by its workload, else its pod, else its address; a linked
  // cluster's peer (named by its identity) as CLUSTER:NAMESPACE/sa/NAME.
  function peer(p) {
    if (!p) {
      return '';
    }
    if (p.workloadName) {
      const sa = p.workloadKind === 'ServiceAccount' ? 'sa/' : '';
      return (p.cluster ? p.cluster + ':' : '') + (p.namespace ? p.namespace + '/' : '') + sa + p.workloadName;
    }
    if (p.pod) {
      return (p.namespace ? p.namespace + '/' : '') + p.pod;
    }
    return p.addr || '';
  }

  function cell(tr, text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) {
      td.className = cls;
    }
    tr.appendChild(td);
    return td;
  }

  function fmtMs(v) {
    return v === undefined || v === null ? '' : (v < 10 ? v.toFixed(1) : v.toFixed(0)) + ' ms';
  }

  function say() {
    let s = 'Streaming: ' + seen + ' requests';
    if (dropped) {
      s += ', ' + dropped + ' events dropped by slow readers';
    }
    status.textContent = s + '.';
  }

  function requestStart(ev) {
    const tr = document.createElement('tr');
    tr.className = 'tap-row ' + (ev.direction || '');
    tr.dataset.id = ev.id || '';
    cell(tr, new Date(ev.time).toLocaleTimeString());
    cell(tr, ev.pod || '');
    cell(tr, ev.direction === 'inbound' ? 'in' : 'out');
    cell(tr, peer(ev.source));
    cell(tr, peer(ev.destination));
    cell(tr, ev.tls ? '✔' : '✘', ev.tls ? 'ok' : 'warn');
    cell(tr, ev.method || '', 'method');
    cell(tr, ev.authority || '');
    cell(tr, ev.path || '', 'path');
    const row = {tr: tr, status: cell(tr, '', 'status'), latency: cell(tr, ''), duration: cell(tr, '')};
    rows.insertBefore(tr, rows.firstChild);
    byID.set(ev.id, row);
    while (rows.children.length > maxRows) {
      const last = rows.lastChild;
      byID.delete(last.dataset.id);
      rows.removeChild(last);
    }
    seen++;
    say();
  }

  function onEvent(ev) {
    const row = byID.get(ev.id);
    switch (ev.type) {
      case 'requestStart':
        requestStart(ev);
        break;
      case 'responseStart':
        if (row) {
          row.status.textContent = String(ev.status || '');
          row.status.className = 'status ' + (ev.status >= 500 ? 'bad' : 'good');
          row.latency.textContent = fmtMs(ev.latencyMs);
        }
        break;
      case 'responseEnd':
        if (row) {
          let d = fmtMs(ev.durationMs);
          if (ev.grpcStatus !== undefined && ev.grpcStatus !== null) {
            d += ' grpc ' + ev.grpcStatus;
          }
          if (ev.reason) {
            d += ' ' + ev.reason;
            row.status.className = 'status bad';
          }
          row.duration.textContent = d;
          byID.delete(ev.id);
        }
        break;
      case 'dropped':
        dropped += ev.count || 0;
        say();
        break;
      case 'error':
        status.textContent = 'Pod ' + (ev.pod || '?') + ' could not be tapped: ' + (ev.message || '');
        break;
    }
  }

  const es = new EventSource(url);
  es.addEventListener('start', function () {
    status.textContent = 'Streaming: waiting for requests…';
  });
  es.addEventListener('tap', function (m) {
    onEvent(JSON.parse(m.data));
  });
  es.addEventListener('end', function (m) {
    es.close();
    status.textContent = JSON.parse(m.data).reason;
    status.className = 'note ended';
  });
  es.onerror = function () {
    if (es.readyState === EventSource.CLOSED) {
      status.textContent = 'The tap stream closed.';
    } else {
      status.textContent = 'The tap stream broke; reconnecting…';
    }
  };
})();
