import Foundation

/// Server-rendered HTML, in plain Swift: escaping, and the page every view sits in.
public enum HTML {
    /// Text and attribute values, escaped.
    public static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
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
        <header><a href="/">bgd</a> <span id="live" title="live updates">●</span></header>
        <main id="main">\(main)</main>
        <script>\(liveScript)</script>
        </body></html>
        """
    }

    static let style = """
        body{font:15px/1.4 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
        header{padding:.6em 1em;background:#1d1d1f;color:#fff}header a{color:#fff;font-weight:600;text-decoration:none}
        #live{color:#888;font-size:.8em}#live.on{color:#34c759}
        main{padding:1em;max-width:1100px;margin:auto}h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
        table{border-collapse:collapse;width:100%;font-size:.92em}td,th{text-align:left;padding:.35em .5em;border-bottom:1px solid #ddd;vertical-align:top}
        .scroll{overflow-x:auto}.reasons{color:#555;font-size:.88em}.code{font-family:ui-monospace,monospace;font-size:.85em;background:#eee;padding:0 .3em;border-radius:3px}
        svg.timeline{width:100%;height:auto;background:#fff;border:1px solid #ddd;border-radius:6px}
        .bar{background:#e5e5ea;border-radius:4px;height:.7em;min-width:6em}.bar>div{background:#0a84ff;height:100%;border-radius:4px}
        .newData{fill:#34c759}.noData,.eventsHandled{fill:#8e8e93}.failed,.crashed,.launchFailed{fill:#ff3b30}.expired{fill:#ff9500}.running{fill:#0a84ff}
        .interrupted,.cancelled{fill:#af52de}.open{fill:#5856d6}.push{fill:#ff2d55}.push.held,.push.queued{fill:#ffcc00}.push.dropped,.push.replaced{fill:#c7c7cc}
        .transfer{fill:#64d2ff}.lifecycle{fill:#a2845e}.planned{fill:none;stroke:#0a84ff;stroke-width:2}
        nav.range a{margin-right:1em}
        """

    /// Live updates: on each event from `/events`, fetch this page's `<main>` again and swap it in.
    static let liveScript = """
        (function(){
          var live=document.getElementById('live');var busy=false,again=false;
          function refresh(){
            if(busy){again=true;return;}busy=true;
            fetch(location.href,{headers:{'X-Partial':'main'},credentials:'same-origin'})
              .then(function(r){return r.ok?r.text():null;})
              .then(function(html){if(html!==null){document.getElementById('main').innerHTML=html;document.body.dataset.updates=String((+document.body.dataset.updates||0)+1);}})
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
