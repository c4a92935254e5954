/* The reports and imports pages: start work through the API, poll its status, draw the bar. */
(function () {
  "use strict";

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function post(url, body) {
    var headers = { "X-CSRFToken": csrfToken() };
    if (!(body instanceof FormData)) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(body);
    }
    return fetch(url, { method: "POST", headers: headers, body: body, credentials: "same-origin" }).then(
      function (response) {
        return response.json().then(
          function (data) { return { status: response.status, data: data }; },
          function () { return { status: response.status, data: { error: "the server answered " + response.status } }; }
        );
      }
    );
  }

  /* Calls fetchStatus every interval ms until done(status) says so; onUpdate each time. */
  function poll(url, onUpdate, done, interval) {
    function tick() {
      fetch(url, { credentials: "same-origin", cache: "no-store" })
        .then(function (response) { return response.json(); })
        .then(function (status) {
          onUpdate(status);
          if (!done(status)) { window.setTimeout(tick, interval || 400); }
        })
        .catch(function () { window.setTimeout(tick, 2000); });
    }
    tick();
  }

  function setBar(panel, progress, finished) {
    var percent = progress && progress.percent !== null && progress.percent !== undefined ? progress.percent : null;
    if (finished) { percent = 100; }
    var fill = panel.querySelector(".progress-fill");
    var bar = panel.querySelector(".progress");
    bar.classList.toggle("indeterminate", percent === null);
    fill.style.width = (percent === null ? 0 : percent) + "%";
    bar.setAttribute("aria-valuenow", percent === null ? "" : String(percent));
    panel.querySelector(".progress-percent").textContent = percent === null ? "" : percent + " %";
    var words = progress ? progress.message || "" : "";
    if (progress && progress.total) {
      words = progress.done.toLocaleString() + " of " + progress.total.toLocaleString() + (words ? " · " + words : "");
    }
    panel.querySelector(".progress-message").textContent = words;
  }

  function size(bytes) {
    if (bytes >= 1e6) { return (bytes / 1e6).toFixed(1) + " MB"; }
    if (bytes >= 1e3) { return (bytes / 1e3).toFixed(1) + " kB"; }
    return bytes + " bytes";
  }

  /* Replace the element #id with the same one from a fresh copy of this page. Only the
     latest request for an id is applied: with several jobs watched, an earlier copy that
     arrives last would bring back statuses already out of date. */
  var refreshes = {};
  function refreshSection(id) {
    var ticket = (refreshes[id] || 0) + 1;
    refreshes[id] = ticket;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        if (refreshes[id] !== ticket) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
        var current = document.getElementById(id);
        if (fresh && current) { current.replaceWith(fresh); }
      });
  }

  // The status badge of one row of a list (rows carry data-id), kept level with the panel.
  function syncRow(sectionId, id, status) {
    var badge = document.querySelector("#" + sectionId + ' tr[data-id="' + id + '"] .badge');
    if (badge) {
      badge.textContent = status;
      badge.className = "badge " + status;
    }
  }

  window.jobsProgress = {
    post: post, poll: poll, setBar: setBar, size: size, refreshSection: refreshSection, syncRow: syncRow
  };
})();
