import Foundation

/// Server-rendered HTML, in plain Swift: escaping, and the page every view sits in.
public enum HTML {
    /// Text and attribute values, escaped — code point by code point, as the browser's parser
    /// reads them. (By `Character`, a prefix like U+0600 joins the `<` after it into one grapheme
    /// that equals no `<`, and passed through whole: a server's `Location` header in a
    /// transfer's error put markup on the page.)
    public static func escape(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out.append(contentsOf: "&amp;".unicodeScalars)
            case "<": out.append(contentsOf: "&lt;".unicodeScalars)
            case ">": out.append(contentsOf: "&gt;".unicodeScalars)
            case "\"": out.append(contentsOf: "&quot;".unicodeScalars)
            case "'": out.append(contentsOf: "&#39;".unicodeScalars)
            default: out.append(scalar)
            }
        }
        return String(out)
    }

    /// A whole page: readable on a phone, no external resources (works offline), and a few lines
    /// of script that re-render `<main>` when bgd says something happened (server-sent events) —
    /// the page is never reloaded.
    public static func page(title: String, main: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(escape(title)) · bgd</title>
        <link rel="icon" href="data:,">
        <style>\(style)</style>
        </head><body>
        <header><a href="/">bgd</a> <span id="live" title="live updates">●</span> <span class="ro">read-only</span></header>
        <main id="main">\(main)</main>
        <script>\(liveScript)</script>
        </body></html>
        """
    }

    /// Colours as variables, so that dark mode (`prefers-color-scheme`) is one block; tables
    /// marked `cards` become a card per row on a phone, and timelines keep their scale there and
    /// scroll sideways instead of shrinking to unreadable marks.
    static let style = """
        :root{color-scheme:light dark;--bg:#fafafa;--fg:#1d1d1f;--muted:#555;--faint:#888;--line:#ddd;--grid:#eee;--panel:#fff;--code:#eee;
        --red:#d70015;--orange:#c93400;--green:#248a3d;--blue:#0a84ff;--grey:#8e8e93;--trouble:#fff1f0}
        @media (prefers-color-scheme:dark){:root{--bg:#121214;--fg:#f2f2f7;--muted:#aeaeb2;--faint:#8e8e93;--line:#3a3a3c;--grid:#2c2c2e;--panel:#1c1c1e;--code:#2c2c2e;
        --red:#ff453a;--orange:#ff9f0a;--green:#30d158;--blue:#0a84ff;--grey:#8e8e93;--trouble:#3a1d1d}}
        body{font:15px/1.4 system-ui,sans-serif;margin:0;color:var(--fg);background:var(--bg)}
        header{padding:.6em 1em;background:#1d1d1f;color:#fff}header a{color:#fff;font-weight:600;text-decoration:none}header .ro{color:#aaa;font-size:.8em;float:right}
        a{color:var(--blue)}#live{color:#888;font-size:.8em}#live.on{color:#34c759}
        main{padding:1em;max-width:1180px;margin:auto}h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
        .notice{color:var(--muted);font-size:.88em;margin:0 0 .8em}
        .tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:.6em}
        .tile{background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:.6em .8em;min-width:0}
        .tile b{display:block;font-size:1.4em}.tile span{color:var(--muted);font-size:.85em;overflow-wrap:anywhere}
        .tile.trouble{border-color:var(--red)}.tile.trouble b{color:var(--red)}.tile.wide{grid-column:1/-1}.tile.wide b{font-size:1.05em}
        table{border-collapse:collapse;width:100%;font-size:.92em}td,th{text-align:left;padding:.35em .5em;border-bottom:1px solid var(--line);vertical-align:top}
        .scroll{overflow-x:auto}td.where{max-width:22em;overflow-wrap:anywhere}tr.trouble{background:var(--trouble)}
        .reasons{color:var(--muted);font-size:.88em;padding-left:1.2em;margin:.2em 0}
        .code{font-family:ui-monospace,monospace;font-size:.85em;background:var(--code);padding:0 .3em;border-radius:3px;overflow-wrap:anywhere}
        .pill{display:inline-block;padding:0 .45em;border-radius:9px;font-size:.85em;font-weight:600;background:var(--code)}
        .outcome-failed .pill,.outcome-crashed .pill,.outcome-launchFailed .pill{background:var(--red);color:#fff}
        .outcome-expired .pill{background:var(--orange);color:#fff}.outcome-newData .pill{background:var(--green);color:#fff}
        .outcome-running .pill{background:var(--blue);color:#fff}
        .timeline-scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
        svg.timeline{box-sizing:border-box;width:100%;height:auto;background:var(--panel);border:1px solid var(--line);border-radius:6px;display:block}
        svg .grid{stroke:var(--grid)}svg .lane{stroke:var(--line)}svg text.axis{fill:var(--faint)}svg text.row{fill:var(--muted)}
        svg line.now{stroke:var(--red);stroke-width:1.5;stroke-dasharray:4 3}svg text.now{fill:var(--red)}
        .bar{background:var(--grid);border-radius:4px;height:.7em;min-width:6em}.bar>div{background:var(--blue);height:100%;border-radius:4px}
        .bar.completed>div{background:var(--green)}.bar.failed>div{background:var(--red)}.bar.cancelled>div{background:var(--grey)}
        .bar.paused>div{background:var(--orange)}.bar.waiting>div{background:repeating-linear-gradient(45deg,var(--blue),var(--blue) 4px,transparent 4px,transparent 8px)}
        tr.transfer.failed .problem{color:var(--red)}
        .newData{fill:#34c759}.noData,.eventsHandled{fill:#8e8e93}.failed,.crashed,.launchFailed{fill:#ff3b30}.expired{fill:#ff9500}.running{fill:#0a84ff}
        .interrupted,.cancelled{fill:#af52de}.open{fill:#5856d6}.push{fill:#ff2d55}.push.held,.push.queued{fill:#ffcc00}.push.dropped,.push.replaced{fill:#c7c7cc}
        .transfer{fill:#64d2ff}.lifecycle{fill:#a2845e}.planned{fill:none;stroke:#0a84ff;stroke-width:2}
        .legend{list-style:none;padding:0;margin:.4em 0 0;display:flex;flex-wrap:wrap;gap:.3em 1em;font-size:.82em;color:var(--muted)}
        .legend li{display:flex;align-items:center;gap:.3em}.now-key{display:inline-block;width:12px;border-top:2px dashed var(--red)}
        nav.range{margin:.3em 0 .5em}nav.range a{margin-right:.9em}nav.range a[aria-current]{font-weight:700;color:var(--fg);text-decoration:none}
        @media (max-width:640px){
        main{padding:.6em}
        table.cards thead{display:none}table.cards,table.cards tbody,table.cards tr,table.cards td{display:block;width:auto}
        table.cards tr{border:1px solid var(--line);border-radius:8px;margin:0 0 .6em;padding:.3em .6em;background:var(--panel)}
        table.cards tr.trouble{background:var(--trouble);border-color:var(--red)}
        table.cards td{border:0;padding:.2em 0 .2em 8em;position:relative;max-width:none;min-height:1.2em}
        table.cards td::before{content:attr(data-label);position:absolute;left:0;width:7.5em;color:var(--faint);font-size:.85em}
        svg.timeline{width:1000px;max-width:none}
        }
        """

    /// Live updates: on each event from `/events`, fetch this page's `<main>` again and swap it in;
    /// a timeline that scrolls (on a phone) is shown at its "now" end.
    /// The page's only script; the dashboard's `Content-Security-Policy` allows it by its hash
    /// and nothing else inline.
    public static let liveScript = """
        (function(){
          var live=document.getElementById('live');var busy=false,again=false;
          // A timeline wider than a phone scrolls: start it at now, where the news is.
          function toNow(){document.querySelectorAll('.timeline-scroll').forEach(function(el){el.scrollLeft=el.scrollWidth;});}
          toNow();
          function refresh(){
            if(busy){again=true;return;}busy=true;
            fetch(location.href,{headers:{'X-Partial':'main'},credentials:'same-origin'})
              .then(function(r){return r.ok?r.text():null;})
              .then(function(html){if(html!==null){document.getElementById('main').innerHTML=html;toNow();document.body.dataset.updates=String((+document.body.dataset.updates||0)+1);}})
              .catch(function(){})
              .then(function(){busy=false;if(again){again=false;refresh();}});
          }
          if(!window.EventSource)return;
          var source=new EventSource('/events');
          source.onopen=function(){live.className='on';};
          source.onerror=function(){live.className='';};
          source.onmessage=refresh;
        })();
        """
}
