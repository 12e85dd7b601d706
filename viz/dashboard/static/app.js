// The dashboard's pages are rendered by the server; this only reloads a
// page every data-refresh seconds while it is visible.
'use strict';
(function () {
  const secs = Number(document.body.dataset.refresh || 0);
  if (!secs) {
    return;
  }
  let due = Date.now() + secs * 1000;
  setInterval(function () {
    if (document.visibilityState === 'visible' && Date.now() >= due) {
      due = Date.now() + secs * 1000;
      location.reload();
    }
  }, 1000);
})();
